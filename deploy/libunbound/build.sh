#!/usr/bin/env bash
# deploy/libunbound/build.sh — libunbound with TLS, from Debian's own source.
#
#   build.sh sources         add deb-src entries beside the system's deb ones (root; make deps,
#                            the Dockerfile's build stage), then apt-get update once
#   build.sh build PREFIX    build and install the library into PREFIX (the Makefile's
#                            $(UNBOUND_PC) rule; the Dockerfile through make)
#   build.sh daemon FILE     the unbound daemon of the same source, with its symbols, as
#                            FILE: for the benchmarks only (make unbound-daemon; callgrind.sh's
#                            BENCH_CG_PEER), never shipped
#
# Why: Debian 12 builds libunbound8 with nettle (--with-nettle), which has no
# TLS, so that library cannot forward over DNS-over-TLS (upstream.tls). The
# unbound daemon Debian ships from the same source is built with OpenSSL.
# This builds the library from the very source package of the installed
# libunbound-dev (same version, Debian's patches applied by dpkg-source),
# configured as debian/rules configures its library build, except OpenSSL
# for nettle: libevent and the event API (ub_ctx_create_ub_event,
# ub_ctx_create_event), the same hardening flags (dpkg-buildflags). Only the
# library, static and PIC, is built: every localdns build (plain, sanitize,
# tsan, fuzz, bench, the image) links it statically through pkg-config, and
# OpenSSL and libevent stay shared libraries from Debian.
#
# PREFIX appears whole or not at all (installed beside it, then renamed), so an
# interrupted build is started again rather than half used.
set -euo pipefail

fail() {
	echo "libunbound: $*" >&2
	exit 1
}

# deb-src twins of the system's Debian entries (deb822 .sources files and
# one-line sources.list), in a file of our own; nothing is changed in theirs.
add_sources() {
	local out=/etc/apt/sources.list.d/localdns-deb-src.sources tmp
	tmp=$(mktemp)
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -e "$f" ] && [ "$f" != "$out" ] || continue
		# only the stanzas of Debian's archive (deb.debian.org or a mirror's /debian paths)
		awk 'BEGIN { RS = ""; ORS = "\n\n" }
		     {
			 n = split($0, line, "\n"); deb = 0; debian = 0
			 for (i = 1; i <= n; i++) {
				 if (line[i] ~ /^Types:/ && (" " line[i] " ") ~ /[ \t]deb[ \t]/) deb = i
				 if (line[i] ~ /^URIs:.*debian/) debian = 1
			 }
			 if (!deb || !debian) next
			 line[deb] = "Types: deb-src"; out = line[1]
			 for (i = 2; i <= n; i++) out = out "\n" line[i]
			 print out
		     }' "$f"
	done >"$tmp"
	if [ -f /etc/apt/sources.list ]; then
		# deb [options] URI SUITE COMPONENT...: the options (arch=, signed-by=) are left out
		awk '$1 == "deb" && $0 ~ /debian/ {
			 i = 2; if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
			 printf "Types: deb-src\nURIs: %s\nSuites: %s\nComponents:", $i, $(i + 1)
			 for (j = i + 2; j <= NF; j++) printf " %s", $j; printf "\n\n" }' \
			/etc/apt/sources.list >>"$tmp"
	fi
	[ -s "$tmp" ] || { rm -f "$tmp"; fail "no Debian deb entry in /etc/apt/sources.list{,.d} to take deb-src from"; }
	if cmp -s "$tmp" "$out"; then
		rm -f "$tmp"
	else
		install -m 0644 "$tmp" "$out"
		rm -f "$tmp"
		echo "libunbound: added $out; apt-get update"
		apt-get update -q
	fi
}

# A static archive exports every global of every object: unbound's internals
# (mesh_stats, log_info, verbose, its compat strlcpy...) would clash with, or
# worse silently stand in for, functions of ours and of other libraries. The
# shared library exports only the API (libunbound/ubsyms.def, its
# -export-symbols list); so does this archive: its objects linked into one
# (ld -r) whose other defined globals are made local.
only_public_symbols() {
	local archive=$1 api=$2 work=$3 extra
	ld -r -o "$work/libunbound.o" --whole-archive "$archive"
	nm --defined-only --extern-only "$work/libunbound.o" | awk '{print $3}' |
		grep -vxFf "$api" >"$work/localize.txt" || true
	objcopy --localize-symbols="$work/localize.txt" "$work/libunbound.o"
	rm -f "$archive"
	ar rcs "$archive" "$work/libunbound.o"
	extra=$(nm --defined-only --extern-only "$archive" | awk 'NF == 3 {print $3}' | grep -vxFf "$api" || true)
	[ -z "$extra" ] || fail "libunbound.a still exports non-API symbols: $extra"
	grep -qx ub_ctx_create_ub_event <(nm --defined-only --extern-only "$archive" | awk '{print $3}') ||
		fail "libunbound.a lacks the event API (ub_ctx_create_ub_event)"
	grep -qx upstream_arc4random_uniform <(nm --undefined-only "$archive" | awk '{print $2}') ||
		fail "libunbound.a does not draw its random numbers from upstream_arc4random_uniform"
	! grep -qx 'arc4random\(_uniform\)\?' <(nm --undefined-only "$archive" | awk '{print $2}') ||
		fail "libunbound.a still calls libc's arc4random"
	# (Not "no calloc left": GCC itself makes a calloc of a malloc and a
	# memset of it, in a few set-up paths.)
	grep -qx upstream_calloc <(nm --undefined-only "$archive" | awk '{print $2}') ||
		fail "libunbound.a does not allocate through upstream_calloc"
}

# Debian's unbound source of the installed libunbound-dev's version, patched, into $1/src.
fetch_source() {
	local work=$1 version
	version=$(dpkg-query -W -f '${Version}' libunbound-dev 2>/dev/null) ||
		fail "libunbound-dev is not installed (make deps): its version picks the source"
	[ -n "$version" ] || fail "libunbound-dev has no version"
	rm -rf "$work"
	mkdir -p "$work"
	echo "libunbound: Debian's unbound $version source into $work"
	(cd "$work" && apt-get source -q --download-only "unbound=$version") >"$work/fetch.log" 2>&1 ||
		{ cat "$work/fetch.log" >&2; fail "cannot fetch the unbound $version source (make deps adds deb-src entries)"; }
	dpkg-source -x "$work"/unbound_*.dsc "$work/src" >"$work/extract.log" 2>&1 ||
		{ cat "$work/extract.log" >&2; fail "dpkg-source -x failed"; }
}

build() {
	local prefix=$1 work src flags
	work=$prefix.work
	fetch_source "$work"
	echo "libunbound: building the library with OpenSSL into $prefix"
	src=$work/src
	mkdir -p "$src/b"
	export DEB_BUILD_MAINT_OPTIONS=hardening=+all
	flags=(CFLAGS="$(cd "$src" && dpkg-buildflags --get CFLAGS)"
	       CPPFLAGS="$(cd "$src" && dpkg-buildflags --get CPPFLAGS)"
	       LDFLAGS="$(cd "$src" && dpkg-buildflags --get LDFLAGS)")
	# debian/rules' CONFIGURE_ARGS and its libunbound build's flags, but --with-ssl for
	# --with-nettle; static and PIC only, installed under prefix.
	(cd "$src/b" && ../configure --prefix="$prefix" \
		--with-libunbound-only --with-ssl --enable-event-api --with-libevent \
		--without-pythonmodule --without-pyunbound \
		--disable-rpath --with-pidfile=/run/unbound.pid --enable-tfo-client --enable-tfo-server \
		--with-rootkey-file=/usr/share/dns/root.key \
		--enable-static --disable-shared --with-pic "${flags[@]}") >"$work/configure.log" 2>&1 ||
		{ tail -30 "$work/configure.log" >&2; fail "configure failed ($work/configure.log)"; }
	grep -q '^#define HAVE_SSL ' "$src/b/config.h" || fail "configure found no OpenSSL (libssl-dev)"
	grep -q '^#define USE_LIBEVENT 1' "$src/b/config.h" || fail "configure found no libevent (libevent-dev)"
	grep -q '^#define HAVE_ARC4RANDOM 1' "$src/b/config.h" || fail "configure found no arc4random in libc"
	# Its random numbers (query IDs, source ports) from localdns's pool per
	# thread, not glibc's arc4random, a getrandom system call each
	# (src/upstream/random.h); its zeroed allocations through malloc's thread
	# cache, which glibc's calloc skips (src/upstream/alloc.h). After
	# configure, which must still find libc's.
	cat >>"$src/b/config.h" <<'EOF'

/* localdns: arc4random from src/upstream/random.c (deploy/libunbound/build.sh) */
#define arc4random upstream_arc4random
#define arc4random_uniform upstream_arc4random_uniform
/* localdns: calloc from src/upstream/alloc.c */
#define calloc upstream_calloc
/* config.h included <stdlib.h> above: declared here, or they would be implicit (int) */
#include <stddef.h>
#include <stdint.h>
uint32_t upstream_arc4random(void);
uint32_t upstream_arc4random_uniform(uint32_t upper);
void *upstream_calloc(size_t n, size_t size);
EOF
	# MAKEFLAGS: not the calling make's jobserver, which this script cannot join.
	env -u MAKEFLAGS -u MFLAGS make -C "$src/b" -j"$(nproc)" lib >"$work/make.log" 2>&1 ||
		{ tail -30 "$work/make.log" >&2; fail "make lib failed ($work/make.log)"; }
	! grep -q "implicit declaration of function .upstream_" "$work/make.log" ||
		fail "libunbound calls our functions undeclared: $(grep -m1 implicit "$work/make.log")"
	env -u MAKEFLAGS -u MFLAGS make -C "$src/b" install-lib DESTDIR="$work/dest" \
		>"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; fail "make install-lib failed"; }
	only_public_symbols "$work/dest$prefix/lib/libunbound.a" "$src/libunbound/ubsyms.def" "$work"
	# The .pc names prefix; the files come there in one rename. No man pages, no libtool archive.
	rm -rf "$work/dest$prefix/share" "$work/dest$prefix/lib/libunbound.la"
	rm -rf "$prefix"
	mv "$work/dest$prefix" "$prefix"
	rm -rf "$work"
}

# The daemon, configured as debian/rules configures it as far as the
# benchmarks' unbound.conf reaches (libevent, OpenSSL, the iterator), with
# Debian's flags and its symbols kept, so that callgrind and perf can name
# its functions beside ours (Debian's own binary is stripped).
daemon() {
	local out=$1 work src
	work=$out.work
	fetch_source "$work"
	src=$work/src
	export DEB_BUILD_MAINT_OPTIONS=hardening=+all
	(cd "$src" && ./configure --with-libevent --with-ssl --disable-rpath --enable-subnet \
		--enable-tfo-client --enable-tfo-server \
		CFLAGS="$(dpkg-buildflags --get CFLAGS)" CPPFLAGS="$(dpkg-buildflags --get CPPFLAGS)" \
		LDFLAGS="$(dpkg-buildflags --get LDFLAGS)") >"$work/configure.log" 2>&1 ||
		{ tail -30 "$work/configure.log" >&2; fail "configure failed ($work/configure.log)"; }
	env -u MAKEFLAGS -u MFLAGS make -C "$src" -j"$(nproc)" unbound >"$work/make.log" 2>&1 ||
		{ tail -30 "$work/make.log" >&2; fail "make unbound failed ($work/make.log)"; }
	install -m 0755 "$src/unbound" "$out"
	rm -rf "$work"
}

case ${1:-} in
sources) add_sources ;;
build) build "${2:?usage: build.sh build PREFIX}" ;;
daemon) daemon "${2:?usage: build.sh daemon FILE}" ;;
*) fail "usage: build.sh sources | build PREFIX | daemon FILE" ;;
esac
