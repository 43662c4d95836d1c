#!/usr/bin/env bash
# static_qps.sh BIN — static-answer throughput and latency of localdns, with
# Unbound from Debian as a peer when it is installed.
#
#   tests/bench/static_qps.sh build/localdns      (or: make bench)
#
# Method (docs/performance.md says why):
#   - 1,000 static names under cluster.local, each with one A and one AAAA;
#     the query file asks for all 2,000 (name, type) pairs in a fixed
#     shuffled order.
#   - The server under test runs with one worker pinned to CPU 0; dnsperf is
#     pinned to CPU 1 (taskset, when there are two CPUs or more).
#   - Run 1, "max": dnsperf -l $BENCH_DURATION -c 8 -q 500, the highest rate it
#     can push; we report QPS, mean latency, lost queries, and the server's
#     own CPU time (utime+stime from /proc) per answered query, which does
#     not depend on how fast the generator is.
#   - Run 2, "fixed": dnsperf -Q $BENCH_RATE (20k QPS) for $BENCH_FIXED
#     seconds with -v, and we compute p50/p99/p99.9 from every reply.
#   - RSS of the server after both runs.
#   - Unbound 1.17 (Debian) gets the same names as local-data, one thread,
#     the same pinning and the same two runs.
# Then the "Static answers" block of docs/performance.md is rewritten with
# the figures, date, machine and commit (BENCH_NO_DOC=1 leaves it alone).
#
# Everything is bounded (timeouts on every step) and every process this
# script starts is killed on exit. Traffic goes to 127.0.0.1 only.
set -euo pipefail

BIN=${1:?usage: static_qps.sh BIN}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DOC=$REPO/docs/performance.md
DURATION=${BENCH_DURATION:-10}
FIXED=${BENCH_FIXED:-10}
RATE=${BENCH_RATE:-20000}
NAMES=${BENCH_NAMES:-1000}

[ -x "$BIN" ] || { echo "static_qps: $BIN is not executable" >&2; exit 1; }
command -v dnsperf >/dev/null || { echo "static_qps: dnsperf not installed (make deps)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "static_qps: python3 not installed" >&2; exit 1; }

TMP=$(mktemp -d /tmp/localdns-bench.XXXXXX)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# CPU placement: server on CPU 0, generator on CPU 1 (when available).
NCPU=$(nproc)
if command -v taskset >/dev/null && [ "$NCPU" -ge 2 ]; then
	SRV_PIN=(taskset -c 0)
	GEN_PIN=(taskset -c 1)
	PINNING="server on CPU 0, dnsperf on CPU 1"
else
	SRV_PIN=()
	GEN_PIN=()
	PINNING="not pinned (fewer than 2 CPUs or no taskset)"
fi

free_port() {
	python3 - <<'EOF'
import socket
for _ in range(50):
    t = socket.socket(); t.bind(("127.0.0.1", 0)); p = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", p))
    except OSError:
        t.close(); u.close(); continue
    t.close(); u.close(); print(p); break
EOF
}

# How busy is the machine before we start? Other work on these CPUs skews
# every figure (p99 most of all), so it is printed and written to the doc.
busy_pct() {
	python3 - <<'EOF'
import time
def snap():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]
t0, i0 = snap(); time.sleep(1.0); t1, i1 = snap()
print("%d" % round(100.0 * (1 - (i1 - i0) / max(1, t1 - t0))))
EOF
}
BUSY=$(busy_pct)
BUSY_NOTE="machine ${BUSY}% busy just before the run"
if [ "$BUSY" -gt 15 ]; then
	echo "static_qps: warning: the machine is ${BUSY}% busy before the run; figures will be low and p99 noisy" >&2
	BUSY_NOTE="$BUSY_NOTE (other work was running: figures are pessimistic)"
fi

# ------------------------------------------------------------------ data
python3 - "$TMP" "$NAMES" <<'EOF'
import random, sys
tmp, n = sys.argv[1], int(sys.argv[2])
names = ["svc-%04d.ns-%02d.svc.cluster.local" % (i, i % 50) for i in range(n)]
def a(i):    return "10.%d.%d.%d" % (100 + i // 65536, (i // 256) % 256, i % 256)
def aaaa(i): return "fd00::%x" % (i + 1)
with open(tmp + "/records.yaml", "w") as f:
    for i, nm in enumerate(names):
        f.write('- {name: %s, ttl: 30s, a: ["%s"], aaaa: ["%s"]}\n' % (nm, a(i), aaaa(i)))
with open(tmp + "/unbound-data.conf", "w") as f:
    f.write('  local-zone: "cluster.local." static\n')
    for i, nm in enumerate(names):
        f.write('  local-data: "%s. 30 IN A %s"\n' % (nm, a(i)))
        f.write('  local-data: "%s. 30 IN AAAA %s"\n' % (nm, aaaa(i)))
pairs = [(nm, t) for nm in names for t in ("A", "AAAA")]
random.Random(42).shuffle(pairs)
with open(tmp + "/queries.txt", "w") as f:
    for nm, t in pairs:
        f.write("%s %s\n" % (nm, t))
EOF
PROBE=$(head -1 "$TMP/queries.txt")

wait_answer() { # port pid name
	local port=$1 pid=$2 name=$3
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || { echo "static_qps: $name exited at start:" >&2; tail -5 "$TMP/$name.log" >&2; return 1; }
		if dig @127.0.0.1 -p "$port" $PROBE +time=1 +tries=1 +short 2>/dev/null | grep -q .; then
			return 0
		fi
		sleep 0.1
	done
	echo "static_qps: $name did not answer within 5s" >&2
	tail -5 "$TMP/$name.log" >&2
	return 1
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# utime + stime of a process (all threads), in clock ticks.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0; }
CLK_TCK=$(getconf CLK_TCK)

# One measurement of the server $pid on $port: sets MAX_QPS, MAX_LAT_US,
# MAX_LOST, SRV_CPU (% of one CPU during the max run), US_PER_Q (server CPU
# time per answered query), P50_US, P99_US, P999_US, FIXED_QPS.
measure() {
	local port=$1 tag=$2 pid=$3 c0 c1 t0 t1
	c0=$(cpu_ticks "$pid")
	t0=$(date +%s.%N)
	timeout $((DURATION + 20)) "${GEN_PIN[@]}" dnsperf -s 127.0.0.1 -p "$port" \
		-d "$TMP/queries.txt" -l "$DURATION" -c 8 -q 500 -t 2 \
		>"$TMP/$tag-max.txt" 2>&1 || true
	MAX_QPS=$(awk '/Queries per second:/ {printf "%d", $4}' "$TMP/$tag-max.txt")
	MAX_LAT_US=$(awk '/Average Latency \(s\):/ {printf "%.0f", $4 * 1e6}' "$TMP/$tag-max.txt")
	MAX_LOST=$(awk '/Queries lost:/ {print $3 $4}' "$TMP/$tag-max.txt")
	[ -n "$MAX_LOST" ] || MAX_LOST="?"
	c1=$(cpu_ticks "$pid")
	t1=$(date +%s.%N)
	read -r SRV_CPU US_PER_Q < <(awk -v c="$((c1 - c0))" -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" \
		'/Queries completed:/ {n = $3} END {s = c / hz; printf "%.0f %.1f\n", 100 * s / (t1 - t0), n ? s * 1e6 / n : 0}' \
		"$TMP/$tag-max.txt")
	timeout $((FIXED + 20)) "${GEN_PIN[@]}" dnsperf -s 127.0.0.1 -p "$port" \
		-d "$TMP/queries.txt" -l "$FIXED" -Q "$RATE" -c 8 -q 500 -t 2 -v \
		>"$TMP/$tag-fixed.txt" 2>&1 || true
	read -r P50_US P99_US P999_US FIXED_QPS FIXED_N < <(python3 - "$TMP/$tag-fixed.txt" <<'EOF'
import sys
lat, qps = [], "0"
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("> "):
        try:
            lat.append(float(line.split()[-1]))
        except ValueError:
            pass
    elif "Queries per second:" in line:
        qps = "%d" % float(line.split()[-1])
lat.sort()
def pct(p):
    return "%.0f" % (lat[min(len(lat) - 1, int(len(lat) * p))] * 1e6) if lat else "0"
print(pct(0.50), pct(0.99), pct(0.999), qps, len(lat))
EOF
)
	[ -n "$MAX_QPS" ] || { echo "static_qps: dnsperf gave no result for $tag:" >&2; tail -20 "$TMP/$tag-max.txt" >&2; return 1; }
}

report() { # label
	printf '%-9s max %7s QPS, mean %5s us, lost %s, server CPU %s%% (%s us/query) | at %s QPS: p50 %s us, p99 %s us, p99.9 %s us | RSS %s KiB\n' \
		"$1" "$MAX_QPS" "$MAX_LAT_US" "$MAX_LOST" "$SRV_CPU" "$US_PER_Q" "$FIXED_QPS" "$P50_US" "$P99_US" "$P999_US" "$RSS"
}

# ------------------------------------------------------------------ localdns
PORT=$(free_port)
cat >"$TMP/localdns.yaml" <<EOF
listen:
  addresses: [127.0.0.1]
  port: $PORT
  workers: 1
interface: {manage: false}
nftables: {enabled: false}
kubernetes: {enabled: false}
health: {listen: ""}
metrics: {listen: ""}
control: {socket: ""}
log: {level: warn}
cluster: {domain: cluster.local, ttl: 5s}
static:
  files: [records.yaml]
EOF
"${SRV_PIN[@]}" "$BIN" --config "$TMP/localdns.yaml" >"$TMP/localdns.log" 2>&1 &
LPID=$!
PIDS+=("$LPID")
wait_answer "$PORT" "$LPID" localdns
echo "localdns: $(basename "$BIN") pid $LPID on 127.0.0.1:$PORT, $NAMES names, workers 1, $PINNING"
measure "$PORT" localdns "$LPID"
RSS=$(rss_kib "$LPID")
L=("$MAX_QPS" "$MAX_LAT_US" "$MAX_LOST" "$SRV_CPU" "$US_PER_Q" "$FIXED_QPS" "$P50_US" "$P99_US" "$P999_US" "$RSS")
report localdns
kill -TERM "$LPID" 2>/dev/null || true

# ------------------------------------------------------------------ unbound
UNBOUND=$(command -v unbound || ls /usr/sbin/unbound 2>/dev/null || true)
U=()
UVER=""
if [ -n "$UNBOUND" ]; then
	UPORT=$(free_port)
	{
		cat <<EOF
server:
  interface: 127.0.0.1
  port: $UPORT
  num-threads: 1
  do-daemonize: no
  chroot: ""
  username: ""
  directory: "$TMP"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  so-rcvbuf: 4m
EOF
		cat "$TMP/unbound-data.conf"
		cat <<EOF
remote-control:
  control-enable: no
EOF
	} >"$TMP/unbound.conf"
	"${SRV_PIN[@]}" "$UNBOUND" -d -c "$TMP/unbound.conf" >"$TMP/unbound.log" 2>&1 &
	UPID=$!
	PIDS+=("$UPID")
	UVER=$("$UNBOUND" -V 2>/dev/null | awk '/^Version/ {print $2; exit}')
	if wait_answer "$UPORT" "$UPID" unbound; then
		measure "$UPORT" unbound "$UPID"
		RSS=$(rss_kib "$UPID")
		U=("$MAX_QPS" "$MAX_LAT_US" "$MAX_LOST" "$SRV_CPU" "$US_PER_Q" "$FIXED_QPS" "$P50_US" "$P99_US" "$P999_US" "$RSS")
		report unbound
	fi
	kill -TERM "$UPID" 2>/dev/null || true
else
	echo "unbound: not installed, no peer figure (apt-get install unbound)"
fi

if [ "${#U[@]}" -gt 0 ] && [ "${U[0]:-0}" -gt 0 ]; then
	python3 -c "print('localdns/unbound: max QPS %.2f, CPU per query %.2f' % (${L[0]} / ${U[0]}, ${L[4]} / max(0.01, ${U[4]})))"
fi

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$REPO" status --porcelain -- src cmd Makefile 2>/dev/null)" ]; then
	COMMIT="$COMMIT+uncommitted changes"
fi
CPU=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
DATE=$(date -u +%Y-%m-%d)
KERNEL=$(uname -r)
DNSPERF=$(dnsperf -h 2>&1 | awk '/^Version/ {print $2; exit}')
python3 - "$DOC" <<EOF
import sys
doc = sys.argv[1]
L = "${L[*]}".split()
U = "${U[*]}".split()
def row(name, v):
    # v: max_qps mean_us lost cpu% us/query fixed_qps p50 p99 p999 rss_kib
    return "| %s | %s | %s | %s | %s%% | %s | %s | %s | %s | %s | %.1f |" % (
        name, "{:,}".format(int(v[0])), v[1], v[2].replace("(", " ("), v[3], v[4],
        "{:,}".format(int(v[5])), v[6], v[7], v[8], int(v[9]) / 1024)
lines = [
    "<!-- static-answers:begin (written by tests/bench/static_qps.sh; do not edit by hand) -->",
    "Measured $DATE on $NCPU CPUs ($CPU), Linux $KERNEL, commit $COMMIT;",
    "dnsperf $DNSPERF, $PINNING; $NAMES names, A/AAAA mix, ${DURATION} s max-rate run, ${FIXED} s at ${RATE} QPS;",
    "$BUSY_NOTE.",
    "",
    "| server | max QPS | mean latency (us) | lost | server CPU | CPU us/query | QPS at fixed rate | p50 (us) | p99 (us) | p99.9 (us) | RSS (MiB) |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    row("localdns ($COMMIT, workers 1)", L),
]
if U:
    lines.append(row("unbound $UVER (num-threads 1, local-data)", U))
    lines.append("")
    lines.append("localdns / unbound: max QPS %.2f, CPU per query %.2f (lower is better)." % (
        int(L[0]) / int(U[0]), float(L[4]) / float(U[4]) if float(U[4]) else 0))
else:
    lines.append("")
    lines.append("Unbound was not installed: no peer figure in this run.")
lines.append("<!-- static-answers:end -->")
block = "\n".join(lines)
text = open(doc).read() if __import__("os").path.exists(doc) else ""
b = text.find("<!-- static-answers:begin")
e = text.find("<!-- static-answers:end -->")
if b < 0 or e < 0:
    sys.exit("static_qps: %s has no static-answers markers; not updated" % doc)
text = text[:b] + block + text[e + len("<!-- static-answers:end -->"):]
open(doc, "w").write(text)
print("static_qps: updated %s" % doc)
EOF
