# localdns build. `make deps` once on a fresh Debian 12 machine (root), then
# `make`, `make run`, `make test`, `make fuzz`, `make bench`, `make image`.

CC       ?= gcc
BUILD    := build
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

# Every library comes through pkg-config.
PKGS     := yaml-0.1 json-c yajl zlib liburcu-memb liburcu-cds libunbound libcurl libnl-3.0 libnl-route-3.0 \
            libmnl libnftnl ldns libmicrohttpd libcap libseccomp
TEST_PKGS := cmocka

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   = $(shell pkg-config --libs $(PKGS))

# OPTFLAGS and SANITIZE may be set on the command line; CFLAGS is built here.
OPTFLAGS ?= -O2 -g
SANITIZE ?=
CFLAGS   = $(OPTFLAGS) $(SANITIZE) -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -Isrc $(PKG_CFLAGS) \
            -DLOCALDNS_VERSION='"$(VERSION)"' -DLOCALDNS_GIT_REV='"$(GIT_REV)"'
LDFLAGS  += $(SANITIZE)
LDLIBS   += $(PKG_LIBS) -pthread

LIB_SRC  := $(wildcard src/*/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/liblocaldns.a
BIN      := $(BUILD)/localdns
BIN_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cmd/localdns/*.c))

# Runs the Kubernetes API client alone, printing its handler calls (integration tests).
KUBE_DUMP := $(BUILD)/tests/kube_dump

# The daemon with a worker that makes a forbidden syscall on cue (tests/privs/forbidden.c,
# for test_privileges.py): the same objects, recvmmsg wrapped. Never installed.
FORBIDDEN := $(BUILD)/tests/localdns-forbidden

# The benchmarks' load generator and canned-reply responder (tests/bench/), also
# run by the integration tests; never installed.
BENCH_TOOLS := $(BUILD)/bench/dnsgen $(BUILD)/bench/bare_responder

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# Debian package names: build, unit test, integration test, fuzz, bench.
# (prometheus is there for promtool, which checks the /metrics text.)
DEPS := gcc make pkg-config git \
        libyaml-dev libjson-c-dev libyajl-dev zlib1g-dev liburcu-dev libcmocka-dev \
        libunbound-dev libevent-dev libnl-3-dev libnl-route-3-dev libmnl-dev libnftnl-dev \
        libcurl4-openssl-dev libmicrohttpd-dev libldns-dev libcap-dev libseccomp-dev \
        clang libclang-rt-14-dev \
        python3 dnsutils knot-dnsutils dnsperf iproute2 procps nsd ldnsutils \
        nftables conntrack prometheus \
        golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev \
        golang-github-xeipuuv-gojsonschema-dev python3-yaml systemd

.PHONY: all deps run test unit integration sanitize fuzz tsan bench image image-test clean chart deploy \
        test-build unit-build integration-build sanitize-build fuzz-build tsan-build

all: $(BIN) $(KUBE_DUMP)

# The benchmark's peer (Unbound) is installed only for `make bench`.
BENCH_DEPS := unbound

# Installs whichever of $(1) are missing, with one apt-get call (and one
# dpkg-query call to find them).
define apt_install
	@installed=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(1) 2>/dev/null \
	    | awk '$$2 " " $$3 " " $$4 == "install ok installed" {print $$1}'); \
	missing=$$(for p in $(1); do echo "$$installed" | grep -qx "$$p" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing:" $$missing; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi
endef

deps:
	$(call apt_install,$(DEPS))

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BIN_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(KUBE_DUMP): tests/kube/kube_dump.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(FORBIDDEN): tests/privs/forbidden.c $(BIN_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BIN_OBJ) $(LIB) $(LDFLAGS) -Wl,--wrap=recvmmsg $(LDLIBS)

$(BUILD)/bench/%: tests/bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

# The cluster table alone, without the API server (tests/bench/cluster_model.c).
$(BUILD)/bench/cluster_model: tests/bench/cluster_model.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/*.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(shell pkg-config --cflags $(TEST_PKGS)) -o $@ $< $(LIB) \
	    $(LDFLAGS) $(LDLIBS) $(shell pkg-config --libs $(TEST_PKGS))

# test_query, test_cache, test_cluster, test_cluster_coredns, test_autopath, test_querylog,
# test_kube, test_mesh and test_multicluster count every allocator and mutex call the library makes.
$(BUILD)/tests/test_query $(BUILD)/tests/test_cache $(BUILD)/tests/test_cluster \
$(BUILD)/tests/test_cluster_coredns $(BUILD)/tests/test_autopath \
$(BUILD)/tests/test_querylog $(BUILD)/tests/test_kube $(BUILD)/tests/test_mesh \
$(BUILD)/tests/test_multicluster: LDFLAGS += \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -Wl,--wrap=free,--wrap=pthread_mutex_lock

# The Helm chart, rendered without Helm: tests/chart/ is Helm's engine (Go
# text/template + sprig) from Debian's Go packages, in GOPATH mode.
CHART        := chart/localdns
CHART_RENDER := $(BUILD)/tests/chart-render
# One Go build cache for every build directory (the sanitized build's
# renderer is the same Go program): exported, so sub-makes keep it.
GO_CACHE     ?= $(abspath $(BUILD))/go-cache
export GO_CACHE
GO_ENV       := GOPATH=/usr/share/gocode GO111MODULE=off CGO_ENABLED=0 GOCACHE=$(GO_CACHE)
DEPLOY_ARGS  := --release-name localdns --namespace kube-system --release-service kubectl

$(CHART_RENDER): $(wildcard tests/chart/*.go)
	@mkdir -p $(dir $@)
	cd tests/chart && $(GO_ENV) go build -o $(abspath $@) .

# build/chart/localdns.yaml (the manifests, default values) and NOTES.txt.
chart: $(CHART_RENDER)
	@mkdir -p $(BUILD)/chart
	$(CHART_RENDER) --notes $(BUILD)/chart/NOTES.txt $(CHART) > $(BUILD)/chart/localdns.yaml

# deploy/kubernetes/localdns.yaml for `kubectl apply -f`; test_chart.py fails
# when it is out of date. Its second line records the arguments.
deploy: $(CHART_RENDER)
	@mkdir -p deploy/kubernetes
	{ echo "# Generated from $(CHART) by \`make deploy\`: edit the chart, not this file."; \
	  echo "# chart-render $(DEPLOY_ARGS)"; \
	  $(CHART_RENDER) $(DEPLOY_ARGS) $(CHART); } > deploy/kubernetes/localdns.yaml.tmp
	mv deploy/kubernetes/localdns.yaml.tmp deploy/kubernetes/localdns.yaml

# Installs what is missing first, so it is the whole set-up on a fresh machine.
run: deps
	$(MAKE) $(BIN)
	$(BIN) --config deploy/examples/local.yaml

# Every pass's binaries first, in one parallel make (JOBS at a time, one per
# CPU by default), then the passes one after another (-j1: their tests must
# not compete with each other, and their output stays in order).
JOBS ?= $(shell nproc)
test: deps
	$(MAKE) -j$(JOBS) test-build
	$(MAKE) -j1 fuzz sanitize tsan unit integration

test-build: fuzz-build sanitize-build tsan-build unit-build integration-build

INTEGRATION_BUILD := $(BIN) $(KUBE_DUMP) $(FORBIDDEN) $(CHART_RENDER) $(BENCH_TOOLS)

unit-build: $(UNIT_BIN)
integration-build: $(INTEGRATION_BUILD)

unit: $(UNIT_BIN)
	tests/unit/run.sh $(UNIT_BIN)

# Two workers: the tests mostly wait on the daemon's timers (tests/integration/run.py -j).
INTEGRATION_JOBS ?= 2
integration: $(INTEGRATION_BUILD)
	python3 tests/integration/run.py --binary $(BIN) -j $(INTEGRATION_JOBS) $(INTEGRATION_FLAGS)

# The unit and integration suites again, built with ASan and UBSan: any
# memory error or leak in the daemon fails the run.
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SANITIZE_VARS  := BUILD=$(BUILD)/sanitize OPTFLAGS="-O1 -g" SANITIZE="$(SANITIZE_FLAGS)"
sanitize:
	$(MAKE) $(SANITIZE_VARS) INTEGRATION_FLAGS=--daemon-tests-only unit integration

sanitize-build:
	$(MAKE) $(SANITIZE_VARS) unit-build integration-build

# Fuzz targets: clang's libFuzzer with ASan and UBSan (docs/security.md, "Fuzzing").
# The library is built again by clang with those sanitizers and libFuzzer's
# coverage hooks in $(FUZZ_LIB_BUILD), by the rules above in a sub-make that
# runs every time (it does nothing when the archive is up to date); each
# target links what it needs from the archive and the pkg-config libraries.
FUZZ_TIME      ?= 30
FUZZ_SANITIZE  := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_BUILD := $(BUILD)/fuzz/lib
FUZZ_LIB       := $(FUZZ_LIB_BUILD)/liblocaldns.a
FUZZ_SRC       := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN       := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)

$(FUZZ_LIB): FORCE
	$(MAKE) BUILD=$(FUZZ_LIB_BUILD) CC=clang OPTFLAGS="-O1 -g" \
	    SANITIZE="$(FUZZ_SANITIZE) -fsanitize=fuzzer-no-link" $@

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/*.h $(FUZZ_LIB)
	clang -std=gnu11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -pthread -Isrc $(PKG_CFLAGS) \
	    $(FUZZ_SANITIZE) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(FUZZ_LDFLAGS) $(PKG_LIBS)

# fuzz_cluster and fuzz_mesh run call_rcu callbacks themselves (tests/fuzz/deferred_rcu.h).
$(BUILD)/fuzz/fuzz_cluster $(BUILD)/fuzz/fuzz_mesh: FUZZ_LDFLAGS := \
	-Wl,--wrap=urcu_memb_call_rcu,--wrap=urcu_memb_barrier

fuzz-build: $(FUZZ_BIN)

fuzz: $(FUZZ_BIN)
	tests/fuzz/run.sh $(FUZZ_TIME) $(FUZZ_BIN)

FORCE:

# ThreadSanitizer over the tests that run the cache, the upstream hand-off
# (request and completion rings) and the cluster table on several threads
# at once, built by the rules above into $(TSAN_BUILD) with GCC's
# -fsanitize=thread. liburcu is not instrumented: src/util/tsan.h tells TSan
# what RCU guarantees, and tests/tsan/suppressions.txt names the races
# inside liburcu's own hand-offs (-Wno-tsan: TSan does not model the
# cache's two atomic_thread_fence calls, which order atomics only).
TSAN_BUILD := $(BUILD)/tsan
TSAN_TESTS := test_cache test_upstream_ring test_upstream_handoff test_cluster test_mesh
TSAN_BIN   := $(TSAN_TESTS:%=$(TSAN_BUILD)/tests/%)
# history_size=4: TSan keeps enough history to restore the stack of an old
# access (a suppression can only match a stack it has).
TSAN_ENV   := TSAN_OPTIONS="halt_on_error=1 history_size=4 \
	      suppressions=$(abspath tests/tsan/suppressions.txt)"

tsan: tsan-build
	$(TSAN_ENV) tests/unit/run.sh $(TSAN_BIN)

tsan-build:
	$(MAKE) BUILD=$(TSAN_BUILD) OPTFLAGS="-O1 -g -Wno-tsan" SANITIZE="-fsanitize=thread" \
	    $(TSAN_BIN)

bench: $(BIN) $(BENCH_TOOLS) $(BUILD)/bench/cluster_model
	$(call apt_install,$(DEPS) $(BENCH_DEPS))
	tests/bench/static_qps.sh $(BIN)
	tests/bench/cache_qps.sh $(BIN)
	tests/bench/search_qps.sh $(BIN)
	tests/bench/srv_qps.sh $(BIN)
	tests/bench/miss_qps.sh $(BIN)
	$(BUILD)/bench/cluster_model
	tests/bench/cluster_sync.py $(BIN) $(if $(BENCH_NO_DOC),,--doc)
	tests/bench/ratelimit.py $(BIN) $(if $(BENCH_NO_DOC),,--doc)

# The container image, built from the Dockerfile with buildah (root, no Docker
# engine) on a bookworm base that debootstrap makes from the Debian mirror and
# tests/image/base.sh caches in build/image/. `make image-test` builds it, then
# checks it (size, contents, package list) and runs the daemon, ctl and cleanup
# from it (tests/image/check.sh). Neither is part of `make test`; IMAGE_SOURCE
# sets the image's source label.
IMAGE_DEPS   := buildah debootstrap libcap2-bin iproute2 dnsutils nftables python3
IMAGE        ?= localhost/localdns:$(VERSION)
IMAGE_BASE   ?= localhost/debian:bookworm
IMAGE_SOURCE ?=

image:
	$(call apt_install,$(IMAGE_DEPS))
	tests/image/base.sh $(IMAGE_BASE) $(BUILD)/image
	tests/image/build.sh $(IMAGE) $(IMAGE_BASE) $(VERSION) $(GIT_REV) "$(IMAGE_SOURCE)"

image-test: image
	tests/image/check.sh $(IMAGE) $(VERSION)

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(BIN_OBJ:.o=.d)
