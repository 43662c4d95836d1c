#!/usr/bin/env bash
# build.sh IMAGE BASE VERSION REVISION [SOURCE] — build the repository's
# Dockerfile with buildah, as root, without a Docker engine.
#
#   tests/image/build.sh localhost/localdns:0.1.0 localhost/debian:bookworm 0.1.0 abc1234
#   (or: make image, which makes BASE first with base.sh)
#
# Isolation is chroot: the RUN steps need no OCI runtime, no cgroup set-up
# and no network namespace (apt reaches the mirror over the host's network).
# A rebuild leaves the previous IMAGE untagged; it is removed here so
# repeated builds do not fill the storage.
set -euo pipefail

usage="usage: build.sh IMAGE BASE VERSION REVISION [SOURCE]"
image=${1:?$usage}
base=${2:?$usage}
version=${3:?$usage}
revision=${4:?$usage}
source=${5:-}

cd "$(dirname "$0")/../.."

old=$(buildah images --quiet --no-trunc "$image" 2>/dev/null || true)
buildah build --isolation chroot --network host --tag "$image" \
	--build-arg DEBIAN_IMAGE="$base" --build-arg VERSION="$version" \
	--build-arg VCS_REF="$revision" --build-arg SOURCE="$source" .
new=$(buildah images --quiet --no-trunc "$image")
if [ -n "$old" ] && [ "$old" != "$new" ]; then
	buildah rmi "$old" >/dev/null 2>&1 || echo "previous image ${old#sha256:} still in use: kept"
fi
