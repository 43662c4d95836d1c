# syntax=docker/dockerfile:1
#
# localdns image: a multi-stage build on Debian 12 (bookworm).
#
#   docker build -t localdns:$(cat VERSION) \
#       --build-arg VERSION=$(cat VERSION) \
#       --build-arg VCS_REF=$(git rev-parse --short HEAD) \
#       --build-arg SOURCE=<repository URL> .
#
# Without a Docker engine, `make image` builds this file with buildah from a
# base made by debootstrap (DEBIAN_IMAGE=localhost/debian:bookworm) and
# `make image-test` checks the result; see README.md.
#
# The build stage compiles build/localdns with the same Makefile developers
# use. The runtime stage carries only the shared libraries, CA certificates
# and DNSSEC root trust anchor; no compiler, no -dev package, no shell tools
# beyond Debian's minimal base. It also installs the libraries the operations
# work links next (libmicrohttpd for health and metrics, libcap for dropping
# privileges, libldns for the control CLI), so it does not change shape when
# they land.
#
# No config is baked in: a node's config comes from the ConfigMap mounted at
# /etc/localdns/config.yaml (see the Helm chart). deploy/examples/local.yaml
# serves 127.0.0.1:5353 for development and is deliberately not used here.

ARG DEBIAN_IMAGE=debian:bookworm

# ---------------------------------------------------------------- build
FROM ${DEBIAN_IMAGE} AS build

ARG DEBIAN_FRONTEND=noninteractive
# libevent-dev and nettle-dev: libunbound.pc names them in Requires.private,
# and pkg-config wants them present even for --cflags.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        gcc libc6-dev make pkg-config \
        libyaml-dev libjson-c-dev libyajl-dev zlib1g-dev liburcu-dev \
        libunbound-dev libevent-dev nettle-dev \
        libnl-3-dev libnl-route-3-dev libmnl-dev libnftnl-dev \
        libcurl4-openssl-dev libmicrohttpd-dev libcap-dev libldns-dev libseccomp-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# .git is not in the build context (.dockerignore): the revision comes in
# as a build argument and overrides the Makefile's `git rev-parse`.
ARG VCS_REF=unknown
RUN make -j"$(nproc)" build/localdns GIT_REV="${VCS_REF}" \
 && ./build/localdns --version

# ---------------------------------------------------------------- runtime
FROM ${DEBIAN_IMAGE}

# Privileges. localdns needs CAP_NET_ADMIN (its link, addresses and nftables
# table) and CAP_NET_BIND_SERVICE (port 53), nothing else.
#
# - Kubernetes (the chart): the pod runs as uid 0 with only those two
#   capabilities and allowPrivilegeEscalation: false. That sets no_new_privs,
#   under which file capabilities cannot raise a non-root user's privileges,
#   so in a pod non-root cannot work; root limited to two capabilities is the
#   least privilege available there. Hence the default USER root below.
# - podman/docker: the `localdns` user (uid/gid 953) can run the daemon,
#   because /usr/bin/localdns carries the two capabilities as permitted file
#   capabilities (+p, no effective bit):
#       podman run --user localdns --cap-add NET_ADMIN,NET_BIND_SERVICE ...
#   localdns raises them into its effective set itself when it drops every
#   other capability at start-up (src/privs), before any thread exists.
#   Without the effective bit the kernel never refuses to execute the binary
#   when a capability is missing from the bounding set (it would with +ep),
#   so `--version` and `--check-config` run in any container; the daemon
#   then says which capability it lacks.
#
# setcap comes from libcap2-bin, installed for that one step and purged in
# the same layer; the binary is copied in first so that layer sets it.
COPY --from=build /src/build/localdns /usr/bin/localdns

ARG DEBIAN_FRONTEND=noninteractive
# Package names checked against bookworm (apt-cache policy): libyaml-0-2
# 0.2.5, libjson-c5 0.16, libyajl2 2.1.0, zlib1g 1.2.13, liburcu8 0.13, libunbound8 1.17, libnl-3-200 and
# libnl-route-3-200 3.7, libmnl0 1.0.4, libnftnl11 1.2.4, libcurl4 7.88,
# libmicrohttpd12 0.9.75, libcap2 2.66, libldns3 1.8.3, libseccomp2 2.5.4. dns-root-data holds
# /usr/share/dns/root.key, the default upstream.trust_anchor.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libyaml-0-2 libjson-c5 libyajl2 zlib1g liburcu8 libunbound8 \
        libnl-3-200 libnl-route-3-200 libmnl0 libnftnl11 \
        libcurl4 libmicrohttpd12 libcap2 libldns3 libseccomp2 \
        ca-certificates dns-root-data libcap2-bin \
 && setcap cap_net_admin,cap_net_bind_service+p /usr/bin/localdns \
 && apt-get purge -y --auto-remove libcap2-bin \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 953 localdns \
 && useradd --system --uid 953 --gid localdns --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin localdns \
 && install -d -o localdns -g localdns -m 0755 /run/localdns \
 && install -d -m 0755 /etc/localdns

# The repository has no LICENSE file yet: NOASSERTION (SPDX) until it does.
# `make image` passes VERSION (the VERSION file) and VCS_REF; SOURCE is the
# repository URL, given by CI. No org.opencontainers.image.created label:
# the image config's own `created` field says when it was built, and a label
# with the build time would make every build differ.
ARG DEBIAN_IMAGE
ARG VERSION=0.0.0
ARG VCS_REF=unknown
ARG SOURCE=""
ARG LICENSES=NOASSERTION
LABEL org.opencontainers.image.title="localdns" \
      org.opencontainers.image.description="Node-local DNS cache for Kubernetes: answers cluster names from local data, per node" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.base.name="${DEBIAN_IMAGE}"

USER root

# No HEALTHCHECK: Kubernetes ignores it and probes /health and /ready on
# health.listen itself (see the chart), and one here would need an HTTP
# client in the image.
EXPOSE 53/udp 53/tcp 9253/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/localdns"]
CMD ["--config", "/etc/localdns/config.yaml"]
