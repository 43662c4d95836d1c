# localdns build. `make deps` once on a fresh Debian 12 machine (root), then
# `make`, `make run`, `make test`, `make fuzz`, `make bench`, `make image`.

CC       ?= gcc
BUILD    := build
VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.0.0)
GIT_REV  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

# libunbound with TLS: Debian 12's libunbound8 is built with nettle, which has
# no TLS (upstream.tls), so every build links a static, PIC libunbound built
# from Debian's own source of the installed libunbound-dev's version with
# OpenSSL, once, into $(UNBOUND_PREFIX) (deploy/libunbound/build.sh;
# docs/ARCHITECTURE.md, "libunbound"). Its path does not depend on BUILD: the
# sanitize, tsan and fuzz builds share it, and `make clean` keeps it. Its name
# also carries a checksum of build.sh, so a changed recipe builds it again.
UNBOUND_VERSION := $(shell dpkg-query -W -f='$${Version}' libunbound-dev 2>/dev/null)
UNBOUND_RECIPE  := $(shell cksum < deploy/libunbound/build.sh | cut -d' ' -f1)
UNBOUND_PREFIX  := $(CURDIR)/build/libunbound-$(or $(UNBOUND_VERSION),missing)-$(UNBOUND_RECIPE)
UNBOUND_PC      := $(UNBOUND_PREFIX)/lib/pkgconfig/libunbound.pc

# Every library comes through pkg-config; libunbound's .pc is ours (found
# first on PKG_CONFIG_PATH), linked statically with its private libraries.
PKG_CONFIG_CMD := PKG_CONFIG_PATH=$(UNBOUND_PREFIX)/lib/pkgconfig$${PKG_CONFIG_PATH:+:$$PKG_CONFIG_PATH} pkg-config
PKGS     := yaml-0.1 json-c yajl zlib liburcu-memb liburcu-cds libcurl libnl-3.0 libnl-route-3.0 \
            libmnl libnftnl ldns libmicrohttpd libcap libseccomp libfstrm libprotobuf-c
TEST_PKGS := cmocka

PKG_CFLAGS = $(shell $(PKG_CONFIG_CMD) --cflags libunbound $(PKGS))
# Our libunbound calls liblocaldns.a's upstream_arc4random{,_uniform} and
# upstream_calloc (build.sh, src/upstream/random.h, alloc.h): -u pulls them in,
# wherever the archive comes on the line.
UNBOUND_NEEDS := -Wl,-u,upstream_arc4random,-u,upstream_arc4random_uniform,-u,upstream_calloc
PKG_LIBS   = $(UNBOUND_NEEDS) $(shell $(PKG_CONFIG_CMD) --static --libs libunbound) \
             $(shell $(PKG_CONFIG_CMD) --libs $(PKGS))

# OPTFLAGS and SANITIZE may be set on the command line; CFLAGS is built here.
OPTFLAGS ?= -O2 -g
SANITIZE ?=
CFLAGS   = $(OPTFLAGS) $(SANITIZE) -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -Isrc -I$(GEN) $(PKG_CFLAGS) \
            -DLOCALDNS_VERSION='"$(VERSION)"' -DLOCALDNS_GIT_REV='"$(GIT_REV)"'
LDFLAGS  += $(SANITIZE)
LDLIBS   += $(PKG_LIBS) -pthread

# Code generated at build time: the dnstap schema's C (protoc-c), in $(GEN).
GEN      := $(BUILD)/gen
GEN_SRC  := $(GEN)/dnstap/dnstap.pb-c.c
GEN_HDR  := $(GEN)/dnstap/dnstap.pb-c.h

LIB_SRC  := $(wildcard src/*/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/dnstap/dnstap.pb-c.o
LIB      := $(BUILD)/liblocaldns.a
BIN      := $(BUILD)/localdns
BIN_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard cmd/localdns/*.c))

# Runs the Kubernetes API client alone, printing its handler calls (integration tests).
KUBE_DUMP := $(BUILD)/tests/kube_dump

# The daemon with a worker, a main thread (at a reload; the keeper's as it waits) that
# make a forbidden syscall, and a resolver that opens a file, on cue
# (tests/privs/forbidden.c, for test_privileges.py): the same objects, recvmmsg,
# ub_resolve_event, daemon_reload and pthread_join wrapped. Never installed.
FORBIDDEN := $(BUILD)/tests/localdns-forbidden

# The daemon linked with Debian's own libunbound8 (shared, nettle, no TLS), for
# test_upstream_tls.py's check that upstream.tls is refused there: the same
# objects, the system's libunbound.pc. Never installed.
NETTLE_DAEMON := $(BUILD)/tests/localdns-nettle

# The benchmarks' load generator and canned-reply responder (tests/bench/), also
# run by the integration tests; never installed.
BENCH_TOOLS := $(BUILD)/bench/dnsgen $(BUILD)/bench/bare_responder

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# Debian package names: build, unit test, integration test, fuzz, bench.
# (prometheus is there for promtool, which checks the /metrics text.)
DEPS := gcc make pkg-config git \
        libyaml-dev libjson-c-dev libyajl-dev zlib1g-dev liburcu-dev libcmocka-dev \
        libunbound-dev libevent-dev libssl-dev libexpat1-dev dpkg-dev bison flex \
        libnl-3-dev libnl-route-3-dev libmnl-dev libnftnl-dev \
        libcurl4-openssl-dev libmicrohttpd-dev libldns-dev libcap-dev libseccomp-dev \
        libfstrm-dev libprotobuf-c-dev protobuf-c-compiler \
        clang libclang-rt-14-dev \
        python3 dnsutils knot-dnsutils dnsperf iproute2 procps nsd ldnsutils unbound \
        fstrm-bin dnstap-ldns golang-github-dnstap-golang-dnstap-cli \
        nftables conntrack iptables prometheus \
        golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev \
        golang-github-xeipuuv-gojsonschema-dev python3-yaml systemd

.PHONY: all deps run test unit integration sanitize fuzz tsan bench image image-test clean distclean \
        unbound-daemon \
        chart deploy \
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
	deploy/libunbound/build.sh sources

# Our libunbound (see UNBOUND_PREFIX): about a minute, once per libunbound-dev version.
$(UNBOUND_PC):
	@[ -n "$(UNBOUND_VERSION)" ] || { echo "libunbound-dev is not installed: make deps" >&2; exit 1; }
	deploy/libunbound/build.sh build $(UNBOUND_PREFIX)

# The unbound daemon of the same source with its symbols, for comparing it
# function by function (tests/bench/callgrind.sh, BENCH_CG_PEER). Never shipped.
UNBOUND_DAEMON := $(CURDIR)/build/unbound-daemon-$(or $(UNBOUND_VERSION),missing)
unbound-daemon: $(UNBOUND_DAEMON)
$(UNBOUND_DAEMON):
	@[ -n "$(UNBOUND_VERSION)" ] || { echo "libunbound-dev is not installed: make deps" >&2; exit 1; }
	deploy/libunbound/build.sh daemon $@

$(BUILD)/obj/%.o: %.c | $(UNBOUND_PC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(GEN)/dnstap/dnstap.pb-c.c $(GEN)/dnstap/dnstap.pb-c.h: src/dnstap/dnstap.proto
	@mkdir -p $(GEN)/dnstap
	protoc-c --c_out=$(GEN)/dnstap --proto_path=src/dnstap $<

# dnstap's C includes the generated header: made before any of it compiles.
$(filter $(BUILD)/obj/src/dnstap/%,$(LIB_OBJ)): $(GEN_HDR)

$(BUILD)/obj/gen/dnstap/dnstap.pb-c.o: $(GEN_SRC) $(GEN_HDR) | $(UNBOUND_PC)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

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
	$(CC) $(CFLAGS) -o $@ $< $(BIN_OBJ) $(LIB) $(LDFLAGS) -Wl,--wrap=recvmmsg \
	    -Wl,--wrap=ub_resolve_event -Wl,--wrap=daemon_reload -Wl,--wrap=pthread_join $(LDLIBS)

$(NETTLE_DAEMON): $(BIN_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(shell pkg-config --libs libunbound) \
	    $(shell $(PKG_CONFIG_CMD) --libs $(PKGS)) -pthread

$(BUILD)/bench/%: tests/bench/%.c | $(UNBOUND_PC)
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
# test_kube, test_mesh, test_multicluster and test_dnstap count every allocator and mutex call the
# library makes.
$(BUILD)/tests/test_query $(BUILD)/tests/test_cache $(BUILD)/tests/test_cluster \
$(BUILD)/tests/test_cluster_coredns $(BUILD)/tests/test_autopath \
$(BUILD)/tests/test_querylog $(BUILD)/tests/test_kube $(BUILD)/tests/test_mesh \
$(BUILD)/tests/test_multicluster $(BUILD)/tests/test_dnstap: LDFLAGS += \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -Wl,--wrap=free,--wrap=pthread_mutex_lock

# test_upstream_random counts and scripts the pool's fills.
$(BUILD)/tests/test_upstream_random: LDFLAGS += -Wl,--wrap=getrandom
$(BUILD)/tests/test_upstream_alloc: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=upstream_calloc

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
# make test fuzzes each target for TEST_FUZZ_TIME seconds (a smoke run over the
# seeds and a little beyond: ten targets, two at a time); `make fuzz` for longer.
TEST_FUZZ_TIME ?= 15
test: deps
	$(MAKE) -j$(JOBS) test-build
	$(MAKE) -j1 FUZZ_TIME=$(TEST_FUZZ_TIME) fuzz sanitize tsan unit integration

test-build: fuzz-build sanitize-build tsan-build unit-build integration-build

INTEGRATION_BUILD := $(BIN) $(KUBE_DUMP) $(FORBIDDEN) $(NETTLE_DAEMON) $(CHART_RENDER) $(BENCH_TOOLS)

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
sanitize: | $(UNBOUND_PC)
	$(MAKE) $(SANITIZE_VARS) INTEGRATION_FLAGS=--daemon-tests-only unit integration

sanitize-build: | $(UNBOUND_PC)
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

$(FUZZ_LIB): FORCE | $(UNBOUND_PC)
	$(MAKE) BUILD=$(FUZZ_LIB_BUILD) CC=clang OPTFLAGS="-O1 -g" \
	    SANITIZE="$(FUZZ_SANITIZE) -fsanitize=fuzzer-no-link" $@

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/*.h $(FUZZ_LIB)
	clang -std=gnu11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -pthread -Isrc $(PKG_CFLAGS) \
	    $(FUZZ_SANITIZE) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(FUZZ_LDFLAGS) $(PKG_LIBS)

# fuzz_cluster and fuzz_mesh run call_rcu callbacks themselves (tests/fuzz/deferred_rcu.h).
$(BUILD)/fuzz/fuzz_cluster $(BUILD)/fuzz/fuzz_mesh: FUZZ_LDFLAGS := \
	-Wl,--wrap=urcu_memb_call_rcu,--wrap=urcu_memb_barrier
# fuzz_http answers for the daemon's state itself (see there).
$(BUILD)/fuzz/fuzz_http: FUZZ_LDFLAGS := -Wl,--wrap=daemon_alive,--wrap=daemon_ready,--wrap=metrics_collect

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
TSAN_TESTS := test_cache test_upstream_ring test_upstream_handoff test_cluster test_mesh test_control
TSAN_BIN   := $(TSAN_TESTS:%=$(TSAN_BUILD)/tests/%)
# history_size=4: TSan keeps enough history to restore the stack of an old
# access (a suppression can only match a stack it has).
TSAN_ENV   := TSAN_OPTIONS="halt_on_error=1 history_size=4 \
	      suppressions=$(abspath tests/tsan/suppressions.txt)"

tsan: tsan-build
	$(TSAN_ENV) tests/unit/run.sh $(TSAN_BIN)

tsan-build: | $(UNBOUND_PC)
	$(MAKE) BUILD=$(TSAN_BUILD) OPTFLAGS="-O1 -g -Wno-tsan" SANITIZE="-fsanitize=thread" \
	    $(TSAN_BIN)

bench: $(BIN) $(BENCH_TOOLS) $(BUILD)/bench/cluster_model
	$(call apt_install,$(DEPS) $(BENCH_DEPS))
	tests/bench/static_qps.sh $(BIN)
	tests/bench/cache_qps.sh $(BIN)
	tests/bench/search_qps.sh $(BIN)
	tests/bench/srv_qps.sh $(BIN)
	tests/bench/miss_qps.sh $(BIN)
	tests/bench/dnstap_qps.sh $(BIN)
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

# clean keeps the libunbound build (UNBOUND_PREFIX); distclean removes it too.
clean:
	[ ! -d $(BUILD) ] || find $(BUILD) -mindepth 1 -maxdepth 1 ! -name 'libunbound-*' -exec rm -rf {} +

distclean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(BIN_OBJ:.o=.d)
