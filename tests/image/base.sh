#!/usr/bin/env bash
# base.sh IMAGE DIR — make a local Debian 12 base image, for building the
# Dockerfile where no registry is reachable (only a Debian mirror).
#
#   tests/image/base.sh localhost/debian:bookworm build/image    (or: make image)
#
# debootstrap --variant=minbase writes a bookworm root file system; its tar
# is kept in DIR (the cache: a second run skips debootstrap), then imported
# into buildah's storage as IMAGE with the shape of Docker Hub's
# debian:bookworm: apt sources for bookworm, -updates and -security, no
# package lists or .deb files, /dev left to the runtime, PATH set, CMD bash.
# Nothing happens when IMAGE already exists. To refresh it (security
# updates): buildah rmi IMAGE; rm DIR/debian-bookworm.tar.
#
# DEBIAN_MIRROR picks the mirror debootstrap and the image's apt use.
set -euo pipefail

image=${1:?usage: base.sh IMAGE DIR}
dir=${2:?usage: base.sh IMAGE DIR}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$dir/debian-bookworm.tar

if buildah inspect --type image "$image" >/dev/null 2>&1; then
	echo "base image $image exists"
	exit 0
fi

# The same sources as Docker Hub's debian:bookworm (deb822 format).
write_apt_sources() {
	local root=$1
	rm -f "$root/etc/apt/sources.list"
	cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
}

make_tarball() {
	local rootfs=$dir/rootfs
	rm -rf "$rootfs"
	mkdir -p "$dir"
	echo "debootstrap bookworm (minbase) from $mirror"
	debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
		tail -20 "$dir/debootstrap.log" >&2
		exit 1
	}
	write_apt_sources "$rootfs"
	# Device nodes come from the container runtime; caches only weigh.
	rm -rf "${rootfs:?}"/dev/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
	       "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/bootstrap.log
	tar --numeric-owner --xattrs -C "$rootfs" -cf "$tarball.part" .
	mv "$tarball.part" "$tarball"
	rm -rf "$rootfs"
}

[ -f "$tarball" ] || make_tarball

ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah add "$ctr" "$tarball" / >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--cmd bash "$ctr"
buildah commit --quiet "$ctr" "$image" >/dev/null
echo "base image $image imported from $tarball"
