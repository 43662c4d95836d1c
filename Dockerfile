# syntax=docker/dockerfile:1
#
# localdns image: a multi-stage build on Debian 12 (bookworm).
#
#   docker build -t localdns:$(cat VERSION) \
#       --build-arg VERSION=$(cat VERSION) \
#       --build-arg VCS_REF=$(git rev-parse --short HEAD) \
#       --build-arg SOURCE=<repository URL> .
#
# The build stage compiles build/localdns with the same Makefile developers
# use; the runtime stage carries only the shared libraries it links against
# (and those the next releases link: libunbound, libnl, libmnl/libnftnl,
# libcurl, libmicrohttpd), so the image does not change shape per release.
#
# No config is baked in: a node's config comes from the ConfigMap mounted at
# /etc/localdns/config.yaml (see chart/). deploy/examples/local.yaml serves
# 127.0.0.1:5353 for development and is deliberately not used here.

ARG DEBIAN_IMAGE=debian:bookworm

# ---------------------------------------------------------------- build
FROM ${DEBIAN_IMAGE} AS build

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        gcc make pkg-config \
        libyaml-dev libjson-c-dev liburcu-dev libunbound-dev \
        libnl-3-dev libnl-route-3-dev libmnl-dev libnftnl-dev \
        libcurl4-openssl-dev libmicrohttpd-dev \
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

ARG DEBIAN_FRONTEND=noninteractive
# Package names checked against bookworm (apt-cache policy): libyaml-0-2
# 0.2.5, libjson-c5 0.16, liburcu8 0.13, libunbound8 1.17, libnl-3-200 and
# libnl-route-3-200 3.7, libmnl0 1.0.4, libnftnl11 1.2.4, libcurl4 7.88,
# libmicrohttpd12 0.9.75.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libyaml-0-2 libjson-c5 liburcu8 libunbound8 \
        libnl-3-200 libnl-route-3-200 libmnl0 libnftnl11 \
        libcurl4 libmicrohttpd12 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /etc/localdns /run/localdns

COPY --from=build /src/build/localdns /usr/bin/localdns

# The repository has no LICENSE file yet: NOASSERTION (SPDX) until it does;
# CI passes SOURCE (the repository URL) and VERSION (the VERSION file).
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

# Root on purpose, for now: managing the listen interface (netlink) and the
# nftables table needs CAP_NET_ADMIN, and binding port 53 needs
# CAP_NET_BIND_SERVICE. A non-root user with file capabilities or ambient
# capabilities from the pod spec is the privileges issue's to design; until
# then the DaemonSet grants only those capabilities (securityContext), not a
# privileged container.
USER root

EXPOSE 53/udp 53/tcp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/localdns"]
CMD ["--config", "/etc/localdns/config.yaml"]
