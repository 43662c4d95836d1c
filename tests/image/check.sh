#!/usr/bin/env bash
# check.sh IMAGE VERSION — check a built localdns image (make image-test).
#
#   tests/image/check.sh localhost/localdns:0.1.0 0.1.0
#
# Checks, in order:
#   - the config: ENTRYPOINT, CMD, default user, PATH, OCI labels (version =
#     VERSION);
#   - the size: at most IMAGE_MAX_BYTES (40 MB), the sum of its layers;
#   - the runtime stage's files (read from the mounted image): no shell,
#     package manager, compiler or setcap; the package list
#     (/var/lib/dpkg/status.d) with no build-only package and a copyright
#     file for each; CA certificates, the DNSSEC root key, the localdns user
#     (953) and /run/localdns owned by it; the binary's file capabilities
#     (the security.capability attribute, read from the mount);
#   - `localdns --version` names VERSION, run without NET_ADMIN in the
#     capability bounding set (as Docker's default set): the file
#     capabilities are +p, so exec never fails for a missing one (see the
#     Dockerfile);
#   - the daemon itself, started with the image's ENTRYPOINT and CMD as the
#     localdns user in a network namespace of its own: it loads the DNSSEC
#     trust anchor, puts its address on lo and its nftables table in place,
#     binds port 53 (a privileged port, through its file capabilities),
#     answers a static name, holds no capability but NET_ADMIN and
#     NET_BIND_SERVICE, and answers the image's own `localdns ctl stats`
#     (text and --json) and `ctl lookup` on its control socket; it exits 0 on
#     SIGTERM, leaving the address and table (nftables.teardown is off);
#   - the image's `localdns cleanup` then removes both.
#
# The daemon runs with `buildah run` (chroot isolation, root). The other
# programs run from the image's root file system by chroot into buildah's
# mount of it, from this script, in a mount namespace of their own with /proc
# and /dev (what a container runtime gives them): the image has no shell to
# redirect their output, and buildah run's own output (1.28, chroot
# isolation) has been seen to go missing under load.
# The network namespace, container and temp dir are removed on every exit.
set -euo pipefail

usage="usage: check.sh IMAGE VERSION"
image=${1:?$usage}
version=${2:?$usage}

export BUILDAH_ISOLATION=chroot
# The uncompressed size of its layers (what `buildah images` shows).
IMAGE_MAX_BYTES=$((40 * 1000 * 1000))
# The image's listen address, on lo in the network namespace.
ADDRESS=169.254.20.10
ns=localdns-image-$$
tmp=$(mktemp -d /tmp/localdns-image.XXXXXX)
ctr=""
mnt=""
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

# Runs "$@" from the image's root file system, as root, in a mount namespace
# of its own with /proc and /dev mounted; stdout is the program's own.
# $privs, when set, holds setpriv(1) options that limit it further; $netns
# names a network namespace to run it in.
in_image() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout 60 ${netns:+ip netns exec $netns} \
		unshare --mount --propagation private sh -c '
			mnt=$1; shift
			mount -t proc proc "$mnt/proc" && mount --rbind /dev "$mnt/dev" && exec "$@"' \
		sh "$mnt" ${privs:+setpriv $privs} chroot "$mnt" "$@"
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
	# `kubectl exec ... -- localdns ctl` looks the binary up in PATH.
	expect_equal "$(config_field Env)" '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]' "ENV"
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

check_size() {
	local bytes
	bytes=$(buildah inspect --type image "$image" | python3 -c '
import json, sys
manifest = json.loads(json.load(sys.stdin)["Manifest"])
print(sum(layer["size"] for layer in manifest["layers"]))')
	((bytes <= IMAGE_MAX_BYTES)) ||
		fail "the image is $bytes bytes, more than $IMAGE_MAX_BYTES (docs/operations.md, Image)"
	ok "the image is $bytes bytes (at most $IMAGE_MAX_BYTES)"
}

# Without NET_ADMIN in the bounding set, as under Docker's default capabilities.
check_version() {
	local out
	out=$(privs="--bounding-set -net_admin" in_image /usr/bin/localdns --version) ||
		fail "localdns --version failed in the image"
	case "$out" in
	"localdns $version "* | "localdns $version") ok "localdns --version (no NET_ADMIN): $out" ;;
	*) fail "localdns --version printed '$out', want 'localdns $version ...'" ;;
	esac
}

# The runtime stage's files, read from the mounted root file system.
check_contents() {
	local tool
	for tool in sh bash dash busybox apt apt-get dpkg gcc cc c99 make ld setcap; do
		if [ -e "$mnt/usr/bin/$tool" ] || [ -e "$mnt/usr/sbin/$tool" ] || [ -e "$mnt/bin/$tool" ]; then
			fail "$tool is in the runtime image"
		fi
	done
	ok "no shell, package manager, compiler or setcap"

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
}

# The package list: one dpkg status stanza per package, read with dpkg-query.
check_packages() {
	local list=$mnt/var/lib/dpkg/status.d packages dev pkg file
	[ -d "$list" ] || fail "no package list (/var/lib/dpkg/status.d)"
	mkdir -p "$tmp/dpkg"
	for file in "$list"/*; do
		cat "$file"
		echo
	done >"$tmp/dpkg/status"
	packages=$(dpkg-query --admindir="$tmp/dpkg" -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' |
		awk '$1 == "ii" && $3 != "" {print $2}')
	dev=$(grep -E -- '-dev$|^(gcc|cpp)(-[0-9]+)?$|^binutils|^make$|^libcap2-bin$|^(bash|dash|apt|dpkg)$' \
		<<<"$packages" || true)
	[ -z "$dev" ] || fail "build-only packages in the package list: ${dev//$'\n'/ }"
	for pkg in libc6 libevent-2.1-7 libcurl4 libssl3 libldns3 libjson-c5 ca-certificates dns-root-data; do
		grep -qx "$pkg" <<<"$packages" || fail "$pkg is not in the package list"
	done
	# libunbound is linked in (with OpenSSL): Debian's libunbound8 (nettle, no TLS) is not used
	! grep -qx libunbound8 <<<"$packages" || fail "libunbound8 is in the package list"
	for file in "$list"/*; do
		pkg=${file##*/}
		grep -qx "$pkg" <<<"$packages" || fail "$file is not the status of an installed $pkg with a version"
		[ -s "$mnt/usr/share/doc/$pkg/copyright" ] || fail "no /usr/share/doc/$pkg/copyright"
	done
	ok "package list: $(wc -l <<<"$packages") packages with versions and copyright files, none build-only"
}

write_smoke_config() {
	mkdir -p "$tmp/etc"
	cat >"$tmp/etc/config.yaml" <<EOF
# The image check's config: port 53 on $ADDRESS, put on lo (no dummy link
# needed) in a network namespace of its own, with the nftables table; no
# Kubernetes, health or metrics. The control socket is the default one, in
# the image's /run/localdns.
listen: {addresses: [$ADDRESS], port: 53}
interface: {manage: true, kind: loopback}
nftables: {enabled: true}
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

# The value of counter $2 in `localdns ctl stats` output $1.
stat_value() {
	awk -v name="$2" '$1 == name {print $2}' <<<"$1"
}

# What the daemon puts on the node: "address table", "-" for each one absent.
# (Each listing whole before grep: grep -q stopping early would fail it under pipefail.)
node_state() {
	local address=- table=- addrs tables
	addrs=$(ip -n "$ns" -o addr show dev lo)
	tables=$(ip netns exec "$ns" nft list tables)
	grep -q " $ADDRESS/32 " <<<"$addrs" && address=address
	grep -qx 'table inet localdns' <<<"$tables" && table=table
	echo "$address $table"
}

# The image's own ctl, as root (kubectl exec's user in the chart's pod).
check_ctl() {
	local stats out
	stats=$(in_image /usr/bin/localdns ctl stats) || fail "localdns ctl stats failed in the image"
	[ "$(stat_value "$stats" queries)" -ge 1 ] && [ "$(stat_value "$stats" answers_static)" -ge 1 ] ||
		fail "ctl stats does not count the query answered: $stats"
	expect_equal "$(stat_value "$stats" control_lookups)" 0 "control_lookups before ctl lookup"
	ok "localdns ctl stats counts $(stat_value "$stats" queries) queries, answered from static records"
	# json-c in the image: the same counters, one JSON document
	out=$(in_image /usr/bin/localdns ctl --json stats) || fail "localdns ctl --json stats failed in the image"
	python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
text = [line.split(" ") for line in sys.argv[2].split("\n")]
sys.exit(list(doc.items()) != [(name, int(value)) for name, value in text])' "$out" "$stats" ||
		fail "ctl --json stats printed $out, not the text's counters"
	ok "localdns ctl --json stats: the same counters as JSON"

	out=$(in_image /usr/bin/localdns ctl lookup image.smoke.example) ||
		fail "localdns ctl lookup failed in the image"
	grep -q '^source: static$' <<<"$out" &&
		grep -qP '^image\.smoke\.example\.\t.*\tA\t192\.0\.2\.53$' <<<"$out" ||
		fail "ctl lookup image.smoke.example printed: $out"
	stats=$(in_image /usr/bin/localdns ctl stats) || fail "localdns ctl stats failed in the image"
	expect_equal "$(stat_value "$stats" control_lookups)" 1 "control_lookups after ctl lookup"
	ok "localdns ctl lookup answers from the static records"
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
		answer=$(ip netns exec "$ns" dig +short +time=1 +tries=1 @$ADDRESS image.smoke.example A 2>/dev/null || true)
		[ "$answer" = 192.0.2.53 ] && break
		kill -0 "$daemon_job" 2>/dev/null || break
		sleep 0.5
	done
	[ "$answer" = 192.0.2.53 ] || { cat "$tmp/daemon.log" >&2; fail "no answer from the daemon on $ADDRESS:53 after $try tries"; }
	ok "the daemon (user localdns, ENTRYPOINT + CMD) answers on port 53"
	expect_equal "$(node_state)" "address table" "the daemon's address on lo and nftables table"

	pid=$(daemon_pid)
	[ -n "$pid" ] || fail "no localdns process in $ns"
	expect_equal "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")" 953 "the daemon's uid"
	caps=$(awk '/^CapEff:/ {print $2}' "/proc/$pid/status")
	# NET_ADMIN is bit 12, NET_BIND_SERVICE bit 10.
	((0x$caps & ~0x1400)) && fail "the daemon holds capabilities beyond NET_ADMIN and NET_BIND_SERVICE: $caps"
	ok "the daemon's effective capabilities ($caps) are within NET_ADMIN and NET_BIND_SERVICE"

	check_ctl

	kill -TERM "$pid"
	status=0
	wait "$daemon_job" || status=$?
	daemon_job=""
	[ "$status" = 0 ] || { cat "$tmp/daemon.log" >&2; fail "the daemon exited $status on SIGTERM"; }
	ok "SIGTERM: the daemon exits 0"
	expect_equal "$(node_state)" "address table" "what the daemon left (nftables.teardown: false)"
}

# What an uninstall runs on each node, with the daemon's config (its
# /etc/localdns was a bind mount of $tmp/etc: here it is copied in).
check_cleanup() {
	local out
	cp "$tmp/etc/config.yaml" "$mnt/etc/localdns/config.yaml"
	out=$(netns=$ns in_image /usr/bin/localdns cleanup --config /etc/localdns/config.yaml) ||
		fail "localdns cleanup failed in the image: $out"
	expect_equal "$(node_state)" "- -" "the address and table after localdns cleanup"
}

buildah inspect --type image "$image" >/dev/null || fail "no image $image (make image)"
ctr=$(buildah from --pull-never "$image")
mnt=$(buildah mount "$ctr")
check_config
check_size
check_contents
check_packages
# Mount points for /proc and /dev, as a container runtime makes them (in the
# container, not the image).
mkdir -p "$mnt/proc" "$mnt/dev"
check_version
check_daemon_as_localdns_user
check_cleanup
echo "image-test: $checks checks passed ($image)"
