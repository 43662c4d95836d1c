#!/usr/bin/env bash
# check.sh IMAGE VERSION — check a built localdns image (make image-test).
#
#   tests/image/check.sh localhost/localdns:0.1.0 0.1.0
#
# Runs the image's programs with buildah (chroot isolation, root), so no
# Docker engine or OCI runtime is needed. Checks, in order:
#   - the config: ENTRYPOINT, CMD, default user, OCI labels (version = VERSION);
#   - `localdns --version` names VERSION;
#   - the runtime stage's files (read from the mounted image): no compiler,
#     -dev package or setcap; CA certificates, the DNSSEC root key, the
#     localdns user (953) and /run/localdns owned by it; the binary's file
#     capabilities;
#   - the daemon itself, started with the image's ENTRYPOINT and CMD as the
#     localdns user in a network namespace of its own: it loads the DNSSEC
#     trust anchor, binds 127.0.0.1:53 (a privileged port, through its file
#     capabilities), answers a static name, holds no capability but
#     NET_ADMIN and NET_BIND_SERVICE, and exits 0 on SIGTERM.
#
# `--version` runs with buildah's default capability set (like Docker's, it
# lacks NET_ADMIN): the file capabilities are +p, so exec never fails for a
# missing one (see the Dockerfile). The daemon run adds both.
# The network namespace, container and temp dir are removed on every exit.
set -euo pipefail

usage="usage: check.sh IMAGE VERSION"
image=${1:?$usage}
version=${2:?$usage}

export BUILDAH_ISOLATION=chroot
ns=localdns-image-$$
tmp=$(mktemp -d /tmp/localdns-image.XXXXXX)
ctr=""
daemon_job=""
checks=0

# Each step runs whether or not the ones before it did (set +e).
cleanup() {
	set +e
	if [ -n "$daemon_job" ]; then
		# buildah run does not pass signals on: the daemon is killed by its PID.
		local pid
		pid=$(daemon_pid)
		kill -KILL "$daemon_job" ${pid:+"$pid"} 2>/dev/null
		wait "$daemon_job" 2>/dev/null
	fi
	ip netns del "$ns" 2>/dev/null
	[ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

ok() {
	checks=$((checks + 1))
	echo "ok - $*"
}

fail() {
	echo "FAIL - $*" >&2
	exit 1
}

# Fails unless "$1" equals "$2"; "$3" says what was compared.
expect_equal() {
	[ "$1" = "$2" ] || fail "$3: got '$1', want '$2'"
	ok "$3 is $2"
}

# Runs "$@" in the image as root. Its output goes to a file in a bind mount:
# buildah's chroot isolation (1.28) has been seen to lose a short stdout
# under load.
in_image() {
	rm -rf "$tmp/out"
	mkdir "$tmp/out"
	timeout 60 buildah run -v "$tmp/out:/check-out" "$ctr" -- \
		sh -c '"$@" >/check-out/stdout' sh "$@" || return
	cat "$tmp/out/stdout"
}

# config_field KEY [KEY...]: one field of the image config, lists as JSON,
# "" when missing.
config_field() {
	buildah inspect --type image "$image" | python3 -c '
import json, sys
value = json.load(sys.stdin)["OCIv1"]["config"]
for key in sys.argv[1:]:
    value = value.get(key, "") if isinstance(value, dict) else ""
print(json.dumps(value) if isinstance(value, list) else value)' "$@"
}

check_config() {
	local label
	expect_equal "$(config_field Entrypoint)" '["/usr/bin/localdns"]' "ENTRYPOINT"
	expect_equal "$(config_field Cmd)" '["--config", "/etc/localdns/config.yaml"]' "CMD"
	expect_equal "$(config_field User)" "root" "USER"
	expect_equal "$(config_field Labels org.opencontainers.image.title)" "localdns" \
		"label org.opencontainers.image.title"
	expect_equal "$(config_field Labels org.opencontainers.image.version)" "$version" \
		"label org.opencontainers.image.version"
	for label in revision licenses; do
		[ -n "$(config_field Labels "org.opencontainers.image.$label")" ] ||
			fail "label org.opencontainers.image.$label missing or empty"
	done
	ok "labels org.opencontainers.image.revision and .licenses set"
}

check_version() {
	local out
	out=$(in_image /usr/bin/localdns --version) || fail "localdns --version failed in the image"
	case "$out" in
	"localdns $version "* | "localdns $version") ok "localdns --version: $out" ;;
	*) fail "localdns --version printed '$out', want 'localdns $version ...'" ;;
	esac
}

# The runtime stage's files, read from the mounted root file system.
check_contents() {
	local mnt packages dev tool
	mnt=$(buildah mount "$ctr")
	for tool in gcc cc c99 make ld setcap; do
		if [ -e "$mnt/usr/bin/$tool" ] || [ -e "$mnt/usr/sbin/$tool" ]; then
			fail "$tool is in the runtime image"
		fi
	done
	ok "no gcc, cc, c99, make, ld or setcap"

	packages=$(dpkg-query --admindir="$mnt/var/lib/dpkg" -W -f '${db:Status-Abbrev} ${Package}\n' |
		awk '$1 == "ii" {print $2}')
	dev=$(grep -E -- '-dev$|^(gcc|cpp)(-[0-9]+)?$|^binutils|^make$|^libcap2-bin$' <<<"$packages" || true)
	[ -z "$dev" ] || fail "build-only packages in the runtime image: ${dev//$'\n'/ }"
	ok "no -dev, compiler or libcap2-bin package ($(wc -l <<<"$packages") packages)"

	expect_equal "$(grep '^localdns:' "$mnt/etc/passwd")" \
		"localdns:x:953:953::/nonexistent:/usr/sbin/nologin" "the localdns user"
	expect_equal "$(grep '^localdns:' "$mnt/etc/group")" "localdns:x:953:" "the localdns group"
	expect_equal "$(stat -c '%u:%g %a' "$mnt/run/localdns")" "953:953 755" "/run/localdns owner and mode"
	expect_equal "$(getcap "$mnt/usr/bin/localdns" | sed 's/^[^ ]* //')" \
		"cap_net_bind_service,cap_net_admin=p" "file capabilities of /usr/bin/localdns"
	[ -s "$mnt/etc/ssl/certs/ca-certificates.crt" ] || fail "no CA certificates"
	[ -s "$mnt/usr/share/dns/root.key" ] || fail "no /usr/share/dns/root.key (dns-root-data)"
	[ -d "$mnt/etc/localdns" ] || fail "no /etc/localdns"
	ok "CA certificates, the DNSSEC root key and /etc/localdns present"
	buildah umount "$ctr" >/dev/null
}

write_smoke_config() {
	mkdir -p "$tmp/etc"
	cat >"$tmp/etc/config.yaml" <<'EOF'
# The image check's config: port 53 on loopback in a network namespace of
# its own; no link, nftables, Kubernetes, health or metrics.
listen: {addresses: [127.0.0.1], port: 53}
interface: {manage: false}
nftables: {enabled: false}
kubernetes: {enabled: false}
health: {listen: ""}
metrics: {listen: ""}
upstream: {dnssec: true}
static:
  records:
    - {name: image.smoke.example, a: [192.0.2.53]}
EOF
}

# The PID of the localdns process in our network namespace, or nothing.
daemon_pid() {
	local pid
	for pid in $(ip netns pids "$ns"); do
		if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = localdns ]; then
			echo "$pid"
			return
		fi
	done
}

check_daemon_as_localdns_user() {
	local answer="" pid="" try status caps
	write_smoke_config
	ip netns add "$ns"
	ip -n "$ns" link set lo up

	# ENTRYPOINT and CMD as check_config found them: buildah run does not apply them.
	ip netns exec "$ns" timeout 60 buildah run --user localdns --cap-add CAP_NET_ADMIN \
		-v "$tmp/etc:/etc/localdns:ro" "$ctr" -- /usr/bin/localdns --config /etc/localdns/config.yaml \
		>"$tmp/daemon.log" 2>&1 &
	daemon_job=$!
	for try in $(seq 1 30); do
		answer=$(ip netns exec "$ns" dig +short +time=1 +tries=1 @127.0.0.1 image.smoke.example A 2>/dev/null || true)
		[ "$answer" = 192.0.2.53 ] && break
		kill -0 "$daemon_job" 2>/dev/null || break
		sleep 0.5
	done
	[ "$answer" = 192.0.2.53 ] || { cat "$tmp/daemon.log" >&2; fail "no answer from the daemon on 127.0.0.1:53 after $try tries"; }
	ok "the daemon (user localdns, ENTRYPOINT + CMD) answers on port 53"

	pid=$(daemon_pid)
	[ -n "$pid" ] || fail "no localdns process in $ns"
	expect_equal "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")" 953 "the daemon's uid"
	caps=$(awk '/^CapEff:/ {print $2}' "/proc/$pid/status")
	# NET_ADMIN is bit 12, NET_BIND_SERVICE bit 10.
	((0x$caps & ~0x1400)) && fail "the daemon holds capabilities beyond NET_ADMIN and NET_BIND_SERVICE: $caps"
	ok "the daemon's effective capabilities ($caps) are within NET_ADMIN and NET_BIND_SERVICE"

	kill -TERM "$pid"
	status=0
	wait "$daemon_job" || status=$?
	daemon_job=""
	[ "$status" = 0 ] || { cat "$tmp/daemon.log" >&2; fail "the daemon exited $status on SIGTERM"; }
	ok "SIGTERM: the daemon exits 0"
}

buildah inspect --type image "$image" >/dev/null || fail "no image $image (make image)"
ctr=$(buildah from --pull-never "$image")
check_config
check_version
check_contents
check_daemon_as_localdns_user
echo "image-test: $checks checks passed ($image)"
