#!/usr/bin/env bash
# rootfs.sh DEST — gather the runtime image's root file system into DEST.
#
# Runs in the Dockerfile's `rootfs` stage: Debian with the runtime packages
# installed and the built binary at /usr/bin/localdns. DEST then holds only
# what localdns loads or reads, to be copied whole into an empty image:
#
#   - /usr/bin/localdns, with cap_net_admin,cap_net_bind_service+p;
#   - the shared libraries it links and theirs (ldd: the dynamic loader
#     included), nothing else: it loads no module at run time (no dlopen,
#     no NSS module, no OpenSSL provider or engine: checked with LD_DEBUG
#     and strace of a validating start, an HTTPS watch of a server given by
#     name, /metrics, ctl and cleanup; the threads' seccomp filters forbid
#     mapping code after start-up anyway);
#   - CA certificates, the DNSSEC root key, OpenSSL's config file (read at
#     its first use, as on Debian);
#   - /etc/passwd and /etc/group (root and localdns, uid/gid 953), an
#     nsswitch.conf that names only glibc's built-in `files` and `dns`,
#     /run/localdns owned by localdns, /etc/localdns, /tmp;
#   - for every Debian package one of whose files went in: its dpkg status
#     stanza as /var/lib/dpkg/status.d/PACKAGE (the layout image scanners
#     read for distroless images) and its /usr/share/doc/PACKAGE/copyright.
#
# Fails if a library is missing, or a file's package cannot be named.
set -euo pipefail

dest=${1:?usage: rootfs.sh DEST}
binary=/usr/bin/localdns
declare -A packages=()
# Files no package ships but a package's scripts make, and that package.
declare -A made_by=(
	[/etc/ssl/certs/ca-certificates.crt]=ca-certificates   # update-ca-certificates
)

# Copy path into dest where it really lives (directories resolved, so
# bookworm's /lib -> usr/lib lands in usr/lib). A symlink comes with what it
# points to: a file is taken too, a directory only made.
take() {
	local dir path target
	dir=$(realpath "$(dirname "$1")")
	path=$dir/$(basename "$1")
	if [ -e "$dest$path" ] || [ -L "$dest$path" ]; then
		return 0
	fi
	mkdir -p "$dest$dir"
	cp -a "$path" "$dest$path"
	if [ -L "$path" ]; then
		target=$(readlink "$path")
		case $target in /*) ;; *) target=$dir/$target ;; esac
		if [ -d "$target" ]; then
			mkdir -p "$dest$(realpath "$target")"
		else
			take "$target"
		fi
	fi
}

# The package that ships path (or made it: made_by). Bookworm's packages still list /lib/...
# while merged /usr keeps the file in /usr/lib/...: both names are asked.
owner() {
	local name canon
	canon=$(realpath "$(dirname "$1")")/$(basename "$1")
	if [ -n "${made_by[$canon]:-}" ]; then
		echo "${made_by[$canon]}"
		return 0
	fi
	for name in "$1" "${1#/usr}" "$canon" "${canon#/usr}"; do
		dpkg-query -S "$name" 2>/dev/null | awk -F': ' '!/^diversion/ {sub(/:.*/, "", $1); print $1; exit}' | grep . && return 0
	done
	echo "rootfs.sh: no package ships $1" >&2
	return 1
}

# take path, and record the packages it came from: its own and, for a
# symlink to a file, the file's.
take_packaged() {
	local name pkg
	for name in "$1" "$(readlink -f "$1")"; do
		[ -d "$name" ] && continue
		pkg=$(owner "$name")
		packages[$pkg]=1
	done
	take "$1"
}

libraries() {
	local out
	out=$(ldd "$binary")
	if grep -q 'not found' <<<"$out"; then
		echo "rootfs.sh: $binary: $out" >&2
		return 1
	fi
	# "libx.so.N => /path (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)";
	# the vDSO has no file.
	awk '$2 == "=>" {print $3} $1 ~ /^\// {print $1}' <<<"$out"
}

# ---- files
libs=$(libraries)
for lib in $libs; do
	take_packaged "$lib"
done
take_packaged /usr/share/dns/root.key
take_packaged /usr/lib/ssl/openssl.cnf
take_packaged /usr/lib/ssl/cert.pem
take_packaged /usr/lib/ssl/certs
take_packaged /etc/ssl/certs/ca-certificates.crt

install -D -m 0755 "$binary" "$dest$binary"
setcap cap_net_admin,cap_net_bind_service+p "$dest$binary"

# Merged /usr: the top-level links (/lib64 -> usr/lib64, the dynamic
# loader's path) for the directories that went in.
for link in /bin /lib /lib32 /lib64 /libx32 /sbin; do
	if [ -L "$link" ] && [ -d "$dest/usr/${link#/}" ]; then
		cp -a "$link" "$dest$link"
	fi
done
# The loader's cache, so that it finds each library at once, as on Debian.
ldconfig -X -r "$dest"

# ---- users, name service, directories
install -d -m 0755 "$dest/etc"
cat >"$dest/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/usr/sbin/nologin
localdns:x:953:953::/nonexistent:/usr/sbin/nologin
PASSWD
cat >"$dest/etc/group" <<'GROUP'
root:x:0:
localdns:x:953:
GROUP
# Only the databases and services glibc has built in: nothing to load.
cat >"$dest/etc/nsswitch.conf" <<'NSS'
passwd: files
group:  files
hosts:  files dns
NSS
install -d -o 953 -g 953 -m 0755 "$dest/run/localdns"
install -d -m 0755 "$dest/etc/localdns"
install -d -m 1777 "$dest/tmp"

# ---- the package list
install -d -m 0755 "$dest/var/lib/dpkg/status.d"
for pkg in "${!packages[@]}"; do
	dpkg-query -s "$pkg" >"$dest/var/lib/dpkg/status.d/$pkg"
	install -D -m 0644 "/usr/share/doc/$pkg/copyright" "$dest/usr/share/doc/$pkg/copyright"
done
echo "rootfs.sh: $(du -sh "$dest" | cut -f1) from ${#packages[@]} packages in $dest"
