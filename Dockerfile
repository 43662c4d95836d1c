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
# use. The rootfs stage installs the runtime packages on Debian and gathers
# what localdns loads (deploy/image/rootfs.sh); the runtime stage is an empty
# image holding only those files: the binary, its shared libraries, CA
# certificates, the DNSSEC root trust anchor, the localdns user, and the
# Debian package list. No shell, no package manager: 24 MB instead of
# the 151 MB of a Debian base with the same libraries.
#
# No config is baked in: a node's config comes from the ConfigMap mounted at
# /etc/localdns/config.yaml (see the Helm chart). deploy/examples/local.yaml
# serves 127.0.0.1:5353 for development and is deliberately not used here.

ARG DEBIAN_IMAGE=debian:bookworm

# ---------------------------------------------------------------- build
FROM ${DEBIAN_IMAGE} AS build

ARG DEBIAN_FRONTEND=noninteractive
# libunbound is built here from Debian's own source with OpenSSL, as `make`
# does everywhere (Debian's libunbound8 uses nettle, which has no TLS for
# upstream.tls; docs/ARCHITECTURE.md, "libunbound"): deb-src entries, the
# installed libunbound-dev's version picks the source, dpkg-dev unpacks it,
# libssl-dev, libevent-dev, libexpat1-dev, bison and flex build it. The
# package lists stay: the Makefile's rule fetches the source.
COPY deploy/libunbound/build.sh /usr/local/sbin/libunbound-build.sh
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        gcc libc6-dev make pkg-config \
        libyaml-dev libjson-c-dev libyajl-dev zlib1g-dev liburcu-dev \
        libunbound-dev libevent-dev libssl-dev libexpat1-dev dpkg-dev bison flex \
        libnl-3-dev libnl-route-3-dev libmnl-dev libnftnl-dev \
        libcurl4-openssl-dev libmicrohttpd-dev libcap-dev libldns-dev libseccomp-dev \
        libfstrm-dev libprotobuf-c-dev protobuf-c-compiler \
 && /usr/local/sbin/libunbound-build.sh sources

WORKDIR /src
COPY . .

# .git is not in the build context (.dockerignore): the revision comes in
# as a build argument and overrides the Makefile's `git rev-parse`.
# The image's binary keeps its symbol table (perf and a crash's backtrace
# name every function) but not the DWARF debug sections, 5 MB of the 6.8
# since libunbound is linked in with its own: every node pulls the image.
ARG VCS_REF=unknown
RUN make -j"$(nproc)" build/localdns GIT_REV="${VCS_REF}" \
 && objcopy --strip-debug build/localdns \
 && ./build/localdns --version

# ---------------------------------------------------------------- rootfs
# The runtime image's files, gathered on Debian: the runtime packages are
# installed here as on any Debian system, then deploy/image/rootfs.sh copies
# out only what localdns loads or reads (see that script) into /rootfs.
FROM ${DEBIAN_IMAGE} AS rootfs

ARG DEBIAN_FRONTEND=noninteractive
# Package names checked against bookworm (apt-cache policy): libyaml-0-2
# 0.2.5, libjson-c5 0.16, libyajl2 2.1.0, zlib1g 1.2.13, liburcu8 0.13,
# libevent-2.1-7 2.1.12 (libunbound is linked in statically, with OpenSSL:
# libssl3 comes with libcurl4), libnl-3-200 and
# libnl-route-3-200 3.7, libmnl0 1.0.4, libnftnl11 1.2.4, libcurl4 7.88,
# libmicrohttpd12 0.9.75, libcap2 2.66, libldns3 1.8.3, libseccomp2 2.5.4,
# libfstrm0 0.6.1, libprotobuf-c1 1.4.1 (dnstap).
# dns-root-data holds /usr/share/dns/root.key, the default
# upstream.trust_anchor; libcap2-bin (setcap) stays in this stage.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libyaml-0-2 libjson-c5 libyajl2 zlib1g liburcu8 libevent-2.1-7 \
        libnl-3-200 libnl-route-3-200 libmnl0 libnftnl11 \
        libcurl4 libmicrohttpd12 libcap2 libldns3 libseccomp2 libfstrm0 libprotobuf-c1 \
        ca-certificates dns-root-data libcap2-bin \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /src/build/localdns /usr/bin/localdns
COPY deploy/image/rootfs.sh /usr/local/sbin/rootfs.sh
RUN /usr/local/sbin/rootfs.sh /rootfs

# ---------------------------------------------------------------- runtime
# An empty image and the gathered files, in one layer: no shell, no package
# manager, no tool but localdns itself. The package list is in
# /var/lib/dpkg/status.d/ (one dpkg status stanza per Debian package that
# gave a file), where image scanners (Trivy, Grype, Syft) look for it.
FROM scratch

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
# rootfs.sh sets them in the rootfs stage; COPY keeps the security.capability
# extended attribute and the owners (/run/localdns is localdns's), and
# `make image-test` checks both in the built image.
COPY --from=rootfs /rootfs/ /

# No shell in the image: `kubectl exec ... -- localdns ctl stats` finds the
# binary through PATH, which a scratch image does not set by itself.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The repository has no LICENSE file yet: NOASSERTION (SPDX) until it does.
# `make image` passes VERSION (the VERSION file) and VCS_REF; SOURCE is the
# repository URL, given by CI. No org.opencontainers.image.created label:
# the image config's own `created` field says when it was built, and a label
# with the build time would make every build differ. No base.name label
# either: the image has no base; its package list says what Debian gave.
ARG VERSION=0.0.0
ARG VCS_REF=unknown
ARG SOURCE=""
ARG LICENSES=NOASSERTION
LABEL org.opencontainers.image.title="localdns" \
      org.opencontainers.image.description="Node-local DNS cache for Kubernetes: answers cluster names from local data, per node" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="${LICENSES}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}"

USER root

# No HEALTHCHECK: Kubernetes ignores it and probes /health and /ready on
# health.listen itself (see the chart), and one here would need an HTTP
# client in the image.
EXPOSE 53/udp 53/tcp 9253/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/localdns"]
CMD ["--config", "/etc/localdns/config.yaml"]
