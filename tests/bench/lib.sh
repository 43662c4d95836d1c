# shellcheck shell=bash disable=SC2034 # sourced; callers read the variables set here
# lib.sh — helpers shared by the benchmark scripts (static_qps.sh,
# cache_qps.sh). Sourced, not run. The caller sets `set -euo pipefail` and
# BIN first, then calls bench_init NAME.
#
# What it provides:
#   bench_init NAME   checks the tools, makes $TMP, installs the exit trap
#                     (kills every process in PIDS, removes $TMP), sets the
#                     CPU placement (SRV_PIN, GEN_PIN, PINNING), CLK_TCK, and
#                     how busy the machine was (BUSY, BUSY_NOTE).
#   free_port, wait_answer PORT PID NAME (asks for $PROBE),
#   bench_spawn NAME CMD... (unpinned) and bench_server NAME CMD... (pinned
#   to the server CPU): start CMD in the background, log to $TMP/NAME.log,
#   set SPID, register it for the exit trap; bench_stop PID.
#   rss_kib PID, cpu_ticks PID, measure PORT TAG PID (the two dnsperf runs),
#   report LABEL, bench_ratio, bench_doc_meta and bench_write_doc (rewrite
#   one marked block of docs/performance.md).
#
# Knobs: BENCH_DURATION (max-rate run, s), BENCH_FIXED (fixed-rate run, s),
# BENCH_RATE (fixed rate, QPS). Every dnsperf run reads $QUERIES
# ($TMP/queries.txt unless the caller sets it).

BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_LIB/../.." && pwd)
DOC=$REPO/docs/performance.md
DURATION=${BENCH_DURATION:-10}
FIXED=${BENCH_FIXED:-10}
RATE=${BENCH_RATE:-20000}

bench_init() {
	BENCH_NAME=$1
	[ -x "$BIN" ] || { echo "$BENCH_NAME: $BIN is not executable" >&2; exit 1; }
	command -v dnsperf >/dev/null || { echo "$BENCH_NAME: dnsperf not installed (make deps)" >&2; exit 1; }
	command -v python3 >/dev/null || { echo "$BENCH_NAME: python3 not installed" >&2; exit 1; }

	TMP=$(mktemp -d /tmp/localdns-bench.XXXXXX)
	QUERIES=${QUERIES:-$TMP/queries.txt}
	PIDS=()
	trap bench_cleanup EXIT
	# Say so when killed: a run that stops without its last lines was
	# signalled (another session's `pkill -f localdns` matches our command
	# line too).
	trap 'echo "$BENCH_NAME: interrupted by a signal" >&2; exit 130' INT TERM

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
	CLK_TCK=$(getconf CLK_TCK)

	# How busy is the machine before we start? Other work on these CPUs
	# skews every figure (p99 most of all), so it is printed and written to
	# the doc.
	BUSY=$(busy_pct)
	BUSY_NOTE="machine ${BUSY}% busy just before the run"
	if [ "$BUSY" -gt 15 ]; then
		echo "$BENCH_NAME: warning: the machine is ${BUSY}% busy before the run; figures will be low and p99 noisy" >&2
		BUSY_NOTE="$BUSY_NOTE (other work was running: figures are pessimistic)"
	fi
}

# TERM everything we started, give each 2 s, then KILL; remove $TMP.
bench_cleanup() {
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

# Start "$@" in the background (bench_server: pinned to the server CPU),
# output to $TMP/NAME.log; SPID is its pid, killed on exit. Not from $(...):
# the process must be a child of this shell.
bench_spawn() {
	local name=$1
	shift
	"$@" >"$TMP/$name.log" 2>&1 &
	SPID=$!
	PIDS+=("$SPID")
}
bench_server() {
	local name=$1
	shift
	bench_spawn "$name" "${SRV_PIN[@]}" "$@"
}

# TERM one process we started and wait (at most 2 s, then KILL) until it
# has gone, so the next server does not share its CPU with a shutdown.
bench_stop() {
	local p=$1
	kill -TERM "$p" 2>/dev/null || true
	for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}

# Wait (5 s at most) until the server on port answers $PROBE ("name type").
wait_answer() { # port pid name
	local port=$1 pid=$2 name=$3
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || { echo "$BENCH_NAME: $name exited at start:" >&2; tail -5 "$TMP/$name.log" >&2; return 1; }
		# shellcheck disable=SC2086 # PROBE is "name type"
		if dig @127.0.0.1 -p "$port" $PROBE +time=1 +tries=1 +short 2>/dev/null | grep -q .; then
			return 0
		fi
		sleep 0.1
	done
	echo "$BENCH_NAME: $name did not answer within 5s" >&2
	tail -5 "$TMP/$name.log" >&2
	return 1
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# utime + stime of a process (all threads), in clock ticks.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0; }

# From one dnsperf output file: "sent completed lost noerror" (numbers) and
# the response-code line as dnsperf printed it.
dnsperf_counts() { # file
	awk '/Queries sent:/ {s = $3} /Queries completed:/ {c = $3} /Queries lost:/ {l = $3}
	     /Response codes:/ {for (i = 3; i <= NF; i++) if ($i == "NOERROR") n = $(i + 1)}
	     END {printf "%d %d %d %d\n", s, c, l, n}' "$1"
}
dnsperf_rcodes() { # file
	awk -F': *' '/Response codes:/ {print $2}' "$1"
}

# One measurement of the server $pid on $port: sets MAX_QPS, MAX_LAT_US,
# MAX_LOST, SRV_CPU (% of one CPU during the max run), US_PER_Q (server CPU
# time per answered query), P50_US, P99_US, P999_US, FIXED_QPS; and, for
# callers that check the answers, MAX_RCODES and FIXED_RCODES (dnsperf's
# "Response codes" lines) and FIXED_LOST. dnsperf's outputs stay in
# $TMP/TAG-max.txt and $TMP/TAG-fixed.txt.
measure() {
	local port=$1 tag=$2 pid=$3 c0 c1 t0 t1
	c0=$(cpu_ticks "$pid")
	t0=$(date +%s.%N)
	timeout $((DURATION + 20)) "${GEN_PIN[@]}" dnsperf -s 127.0.0.1 -p "$port" \
		-d "$QUERIES" -l "$DURATION" -c 8 -q 500 -t 2 \
		>"$TMP/$tag-max.txt" 2>&1 || true
	MAX_QPS=$(awk '/Queries per second:/ {printf "%d", $4}' "$TMP/$tag-max.txt")
	MAX_LAT_US=$(awk '/Average Latency \(s\):/ {printf "%.0f", $4 * 1e6}' "$TMP/$tag-max.txt")
	MAX_LOST=$(awk '/Queries lost:/ {print $3 $4}' "$TMP/$tag-max.txt")
	[ -n "$MAX_LOST" ] || MAX_LOST="?"
	MAX_RCODES=$(dnsperf_rcodes "$TMP/$tag-max.txt")
	c1=$(cpu_ticks "$pid")
	t1=$(date +%s.%N)
	read -r SRV_CPU US_PER_Q < <(awk -v c="$((c1 - c0))" -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" \
		'/Queries completed:/ {n = $3} END {s = c / hz; printf "%.0f %.1f\n", 100 * s / (t1 - t0), n ? s * 1e6 / n : 0}' \
		"$TMP/$tag-max.txt")
	timeout $((FIXED + 20)) "${GEN_PIN[@]}" dnsperf -s 127.0.0.1 -p "$port" \
		-d "$QUERIES" -l "$FIXED" -Q "$RATE" -c 8 -q 500 -t 2 -v \
		>"$TMP/$tag-fixed.txt" 2>&1 || true
	FIXED_LOST=$(awk '/Queries lost:/ {print $3 $4}' "$TMP/$tag-fixed.txt")
	[ -n "$FIXED_LOST" ] || FIXED_LOST="?"
	FIXED_RCODES=$(dnsperf_rcodes "$TMP/$tag-fixed.txt")
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
	[ -n "$MAX_QPS" ] || { echo "$BENCH_NAME: dnsperf gave no result for $tag:" >&2; tail -20 "$TMP/$tag-max.txt" >&2; return 1; }
}

# The figures of the last measure (plus RSS, set by the caller) as a list:
# max_qps mean_us lost cpu% us/query fixed_qps p50 p99 p999 rss_kib.
figures() {
	echo "$MAX_QPS $MAX_LAT_US $MAX_LOST $SRV_CPU $US_PER_Q $FIXED_QPS $P50_US $P99_US $P999_US $RSS"
}

report() { # label
	printf '%-9s max %7s QPS, mean %5s us, lost %s, server CPU %s%% (%s us/query) | at %s QPS: p50 %s us, p99 %s us, p99.9 %s us | RSS %s KiB\n' \
		"$1" "$MAX_QPS" "$MAX_LAT_US" "$MAX_LOST" "$SRV_CPU" "$US_PER_Q" "$FIXED_QPS" "$P50_US" "$P99_US" "$P999_US" "$RSS"
}

# localdns against Unbound, from the arrays L and U (see figures).
bench_ratio() {
	if [ "${#U[@]}" -gt 0 ] && [ "${U[0]:-0}" -gt 0 ]; then
		python3 -c "print('localdns/unbound: max QPS %.2f, CPU per query %.2f' % (${L[0]} / ${U[0]}, ${L[4]} / max(0.01, ${U[4]})))"
	fi
}

# COMMIT (with "+uncommitted changes" when src, cmd or the Makefile differ
# from HEAD), CPU, DATE, KERNEL, DNSPERF: the run's provenance for the doc.
bench_doc_meta() {
	COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git -C "$REPO" status --porcelain -- src cmd Makefile 2>/dev/null)" ]; then
		COMMIT="$COMMIT+uncommitted changes"
	fi
	CPU=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
	DATE=$(date -u +%Y-%m-%d)
	KERNEL=$(uname -r)
	DNSPERF=$(dnsperf -h 2>&1 | awk '/^Version/ {print $2; exit}')
}

# Rewrite the block between "<!-- MARKER:begin" and "<!-- MARKER:end -->" in
# $DOC: provenance, the table (localdns from L, Unbound from U when it ran),
# the ratio, then any NOTE lines. Call bench_doc_meta first.
bench_write_doc() { # marker workload localdns-label unbound-label [note...]
	local marker=$1 workload=$2 llabel=$3 ulabel=$4
	shift 4
	BD_MARKER=$marker BD_SCRIPT="$BENCH_NAME.sh" BD_NAME=$BENCH_NAME \
	BD_HEAD1="Measured $DATE on $NCPU CPUs ($CPU), Linux $KERNEL, commit $COMMIT;" \
	BD_HEAD2="dnsperf $DNSPERF, $PINNING; $workload, ${DURATION} s max-rate run, ${FIXED} s at ${RATE} QPS;" \
	BD_HEAD3="$BUSY_NOTE." \
	BD_LLABEL=$llabel BD_ULABEL=$ulabel BD_L="${L[*]}" BD_U="${U[*]}" \
	python3 - "$DOC" "$@" <<'EOF'
import os, sys
doc, notes = sys.argv[1], sys.argv[2:]
env = os.environ
marker, name = env["BD_MARKER"], env["BD_NAME"]
L = env["BD_L"].split()
U = env["BD_U"].split()
def row(label, v):
    # v: max_qps mean_us lost cpu% us/query fixed_qps p50 p99 p999 rss_kib
    return "| %s | %s | %s | %s | %s%% | %s | %s | %s | %s | %s | %.1f |" % (
        label, "{:,}".format(int(v[0])), v[1], v[2].replace("(", " ("), v[3], v[4],
        "{:,}".format(int(v[5])), v[6], v[7], v[8], int(v[9]) / 1024)
begin = "<!-- %s:begin" % marker
end = "<!-- %s:end -->" % marker
lines = [
    "%s (written by tests/bench/%s; do not edit by hand) -->" % (begin, env["BD_SCRIPT"]),
    env["BD_HEAD1"],
    env["BD_HEAD2"],
    env["BD_HEAD3"],
    "",
    "| server | max QPS | mean latency (us) | lost | server CPU | CPU us/query | QPS at fixed rate | p50 (us) | p99 (us) | p99.9 (us) | RSS (MiB) |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    row(env["BD_LLABEL"], L),
]
if U:
    lines.append(row(env["BD_ULABEL"], U))
    lines.append("")
    lines.append("localdns / unbound: max QPS %.2f, CPU per query %.2f (lower is better)." % (
        int(L[0]) / int(U[0]), float(L[4]) / float(U[4]) if float(U[4]) else 0))
else:
    lines.append("")
    lines.append("Unbound was not installed: no peer figure in this run.")
if notes:
    lines.append("")
    lines.extend(notes)
lines.append(end)
block = "\n".join(lines)
text = open(doc).read() if os.path.exists(doc) else ""
b = text.find(begin)
e = text.find(end)
if b < 0 or e < 0:
    sys.exit("%s: %s has no %s markers; not updated" % (name, doc, marker))
text = text[:b] + block + text[e + len(end):]
open(doc, "w").write(text)
print("%s: updated %s" % (name, doc))
EOF
}
