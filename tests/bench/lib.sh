# shellcheck shell=bash disable=SC2034 # sourced; callers read the variables set here
# lib.sh — helpers shared by the benchmark scripts (static_qps.sh,
# cache_qps.sh, search_qps.sh, srv_qps.sh). Sourced, not run. The caller
# sets `set -euo pipefail` and BIN first, then calls bench_init NAME.
#
# What it provides:
#   bench_init NAME   makes BIN an absolute path, checks the tools (dnsgen and bare_responder, built next
#                     to BIN in bench/), makes $TMP, installs the exit trap
#                     (kills every process in PIDS, removes $TMP), sets the
#                     CPU placement (SRV_PIN, GEN_PIN, PINNING), CLK_TCK, and
#                     how busy the machine was (BUSY, BUSY_NOTE).
#   free_port, wait_answer PORT PID NAME [SECONDS] (asks for $PROBE), start_localdns
#   (config on stdin) and run_unbound MEASURE_FUNCTION (the peer, config on
#   stdin), bare_rounds_and_ratio (the bare responder, the rounds, the ratios),
#   bench_spawn NAME CMD... (unpinned) and bench_server NAME CMD... (pinned
#   to the server CPU): start CMD in the background, log to $TMP/NAME.log,
#   set SPID, register it for the exit trap; bench_stop PID.
#   rss_kib PID, cpu_ticks PID, gen FILE ARGS... (one dnsgen run), gen_value
#   FILE KEY, measure PORT TAG PID (the dnsgen runs and the dnsperf
#   cross-check), check_answers TAG, figures, report LABEL, measure_bare (the
#   bare responder, into B), bare_pad (its -a for a mix of larger replies),
#   alternate_rounds (localdns and the bare responder taking turns, into
#   ROUNDS_TEXT), bench_ratio, bench_doc_meta and bench_write_doc (rewrite
#   one marked block of docs/performance.md); for the scripts whose answers
#   come from an upstream: nsd_start (NSD serving their zones), nsd_queries,
#   nsd_delta, warm_up and run_server (warm-up, then measure_and_report); for
#   the cold-miss scripts, miss_upstream_start (NSD with the wildcard zone)
#   and fresh_names (names nobody asked).
#
# Knobs: BENCH_DURATION (max-rate run, s), BENCH_FIXED (fixed-rate run, s),
# BENCH_RATE (fixed rate, QPS), BENCH_DNSPERF (dnsperf cross-check run, s;
# 0 = none), BENCH_ROUNDS and BENCH_ROUND_SECS (alternating rounds: how
# many, how long each server's run; 0 rounds = none). Every run reads
# $QUERIES ($TMP/queries.txt unless the caller sets it); a query file whose
# lines name the reply they expect (dnsgen's third column) is checked
# against that when the caller sets EXPECTATIONS=1.

BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_LIB/../.." && pwd)
DOC=$REPO/docs/performance.md
DURATION=${BENCH_DURATION:-10}
FIXED=${BENCH_FIXED:-10}
RATE=${BENCH_RATE:-20000}
DNSPERF_TIME=${BENCH_DNSPERF:-5}
ROUNDS=${BENCH_ROUNDS:-3}
ROUND_SECS=${BENCH_ROUND_SECS:-5}
EXPECTATIONS=${EXPECTATIONS:-0}
# dnsgen's sockets and queries in flight in the max-rate run (dnsperf's -c and -q as before).
GEN_SOCKETS=8
GEN_OUTSTANDING=500

bench_init() {
	BENCH_NAME=$1
	BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
	[ -x "$BIN" ] || { echo "$BENCH_NAME: $BIN is not executable" >&2; exit 1; }
	DNSGEN=$(dirname "$BIN")/bench/dnsgen
	BARE=$(dirname "$BIN")/bench/bare_responder
	for t in "$DNSGEN" "$BARE"; do
		[ -x "$t" ] || { echo "$BENCH_NAME: $t not built (make $t, or make bench)" >&2; exit 1; }
	done
	command -v python3 >/dev/null || { echo "$BENCH_NAME: python3 not installed" >&2; exit 1; }
	command -v dig >/dev/null || { echo "$BENCH_NAME: dig not installed (make deps)" >&2; exit 1; }
	if [ "$DNSPERF_TIME" != 0 ] && ! command -v dnsperf >/dev/null; then
		echo "$BENCH_NAME: dnsperf not installed: no cross-check (make deps)" >&2
		DNSPERF_TIME=0
	fi

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
		PINNING="server on CPU 0, generator on CPU 1"
	else
		SRV_PIN=()
		GEN_PIN=()
		PINNING="not pinned (fewer than 2 CPUs or no taskset)"
	fi
	CLK_TCK=$(getconf CLK_TCK)
	NSD_PIN=() # nsd_start's placement: none unless the caller sets one

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
		bench_reap "$p"
	done
	rm -rf "$TMP"
}

# A port free on 127.0.0.1 for UDP and TCP: the integration harness's pick.
free_port() {
	python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import harness; print(harness.free_port())' \
		"$REPO/tests/integration"
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
	kill -TERM "$1" 2>/dev/null || true
	bench_reap "$1"
}

# Wait (at most 2 s, then KILL) until a process sent TERM has gone.
bench_reap() { # pid
	local p=$1
	for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}

# Wait (5 s at most) until the server on port answers $PROBE ("name type").
wait_answer() { # port pid name [seconds: 5; more for a server under valgrind]
	local port=$1 pid=$2 name=$3 seconds=${4:-5}
	for _ in $(seq 1 $((seconds * 10))); do
		kill -0 "$pid" 2>/dev/null || { echo "$BENCH_NAME: $name exited at start:" >&2; tail -5 "$TMP/$name.log" >&2; return 1; }
		# shellcheck disable=SC2086 # PROBE is "name type"
		if dig @127.0.0.1 -p "$port" $PROBE +time=1 +tries=1 +short 2>/dev/null | grep -q .; then
			return 0
		fi
		sleep 0.1
	done
	echo "$BENCH_NAME: $name did not answer within ${seconds}s" >&2
	tail -5 "$TMP/$name.log" >&2
	return 1
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# utime + stime of a process (all threads), in clock ticks.
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0; }

# One dnsgen run (pinned to the generator CPU): its key=value line goes to
# FILE, its readable summary to FILE.err.
gen() { # file dnsgen-args...
	local file=$1
	shift
	timeout 300 "${GEN_PIN[@]}" "$DNSGEN" -s 127.0.0.1 -d "$QUERIES" "$@" >"$file" 2>"$file.err" || true
}
gen_value() { # file key
	awk -v k="$2" '{for (i = 1; i <= NF; i++) {n = index($i, "="); if (substr($i, 1, n - 1) == k) print substr($i, n + 1)}}' "$1"
}

# One measurement of the server $pid on $port: sets MAX_QPS, MAX_LOST,
# SRV_CPU (% of one CPU during the max-rate run), US_PER_Q (server CPU time
# per answered query), GEN_CPU (the generator's CPU %, same run), P50_US,
# P99_US, P999_US, FIXED_QPS and DNSPERF_QPS ("-" without the cross-check).
# The outputs stay in $TMP/TAG-max.txt, $TMP/TAG-fixed.txt (dnsgen) and
# $TMP/TAG-dnsperf.txt.
measure() {
	local port=$1 tag=$2 pid=$3 c0 c1 t0 t1
	c0=$(cpu_ticks "$pid")
	t0=$(date +%s.%N)
	gen "$TMP/$tag-max.txt" -p "$port" -l "$DURATION" -c "$GEN_SOCKETS" -q "$GEN_OUTSTANDING" -t 2
	c1=$(cpu_ticks "$pid")
	t1=$(date +%s.%N)
	MAX_QPS=$(gen_value "$TMP/$tag-max.txt" qps)
	[ -n "$MAX_QPS" ] || { echo "$BENCH_NAME: dnsgen gave no result for $tag:" >&2; tail -20 "$TMP/$tag-max.txt.err" >&2; return 1; }
	MAX_LOST=$(gen_value "$TMP/$tag-max.txt" lost)
	GEN_CPU=$(gen_value "$TMP/$tag-max.txt" gen_cpu_pct)
	read -r SRV_CPU US_PER_Q < <(awk -v c="$((c1 - c0))" -v hz="$CLK_TCK" -v t0="$t0" -v t1="$t1" \
		-v n="$(gen_value "$TMP/$tag-max.txt" received)" \
		'BEGIN {s = c / hz; printf "%.0f %.2f\n", 100 * s / (t1 - t0), n ? s * 1e6 / n : 0}')
	gen "$TMP/$tag-fixed.txt" -p "$port" -l "$FIXED" -Q "$RATE" -c "$GEN_SOCKETS" -q "$GEN_OUTSTANDING" -t 2
	P50_US=$(gen_value "$TMP/$tag-fixed.txt" p50_us)
	P99_US=$(gen_value "$TMP/$tag-fixed.txt" p99_us)
	P999_US=$(gen_value "$TMP/$tag-fixed.txt" p999_us)
	FIXED_QPS=$(gen_value "$TMP/$tag-fixed.txt" qps)
	awk -v q="$FIXED_QPS" -v r="$RATE" 'BEGIN {exit !(q < 0.95 * r || q > 1.05 * r)}' &&
		echo "$BENCH_NAME: warning: $tag: asked $RATE QPS, dnsgen reached $FIXED_QPS; the percentiles are not at that rate" >&2
	DNSPERF_QPS="-"
	if [ "$DNSPERF_TIME" != 0 ]; then
		# dnsperf takes "name TYPE" only, not dnsgen's expectation column
		awk 'NF >= 2 && $1 !~ /^[;#]/ {print $1, $2}' "$QUERIES" >"$TMP/dnsperf-queries.txt"
		timeout $((DNSPERF_TIME + 20)) "${GEN_PIN[@]}" dnsperf -s 127.0.0.1 -p "$port" \
			-d "$TMP/dnsperf-queries.txt" -l "$DNSPERF_TIME" -c 8 -q 500 -t 2 \
			>"$TMP/$tag-dnsperf.txt" 2>&1 || true
		DNSPERF_QPS=$(awk '/Queries per second:/ {printf "%d", $4}' "$TMP/$tag-dnsperf.txt")
		[ -n "$DNSPERF_QPS" ] || DNSPERF_QPS="-"
	fi
}

# After measure: was every query of both dnsgen runs answered NOERROR with
# a non-empty answer (or, with EXPECTATIONS=1 and for any server but the
# bare responder, which answers everything the same way: as its query file
# line expects), none lost, no wrong or stray reply? Sets ANSWERS_OK (1 or
# 0) and ANSWERS_TEXT (what happened, with the average reply size); warns
# when not.
check_answers() { # tag
	local tag=$1 f v problems="" k expect=0 checks
	[ "$EXPECTATIONS" = 1 ] && [ "$tag" != bare ] && expect=1
	for f in max fixed; do
		v="$TMP/$tag-$f.txt"
		if [ "$expect" = 1 ]; then
			[ "$(gen_value "$v" expect_ok)" = "$(gen_value "$v" received)" ] ||
				problems="$problems; $f run: $(gen_value "$v" received) answered, $(gen_value "$v" expect_ok) as expected, $(gen_value "$v" expect_failed) not"
			checks="lost truncated mismatched unexpected errors"
		else
			[ "$(gen_value "$v" noerror)" = "$(gen_value "$v" received)" ] ||
				problems="$problems; $f run: $(gen_value "$v" received) answered, $(gen_value "$v" noerror) NOERROR, $(gen_value "$v" nxdomain) NXDOMAIN, $(gen_value "$v" servfail) SERVFAIL, $(gen_value "$v" rcode_other) other"
			checks="lost no_answer truncated mismatched unexpected errors"
		fi
		for k in $checks; do
			[ "$(gen_value "$v" "$k")" = 0 ] || problems="$problems; $f run: $k $(gen_value "$v" "$k")"
		done
	done
	REPLY_BYTES=$(gen_value "$TMP/$tag-max.txt" size_avg)
	v="$TMP/$tag-max.txt"
	if [ -z "$problems" ] && [ "$expect" = 1 ]; then
		ANSWERS_OK=1
		ANSWERS_TEXT="every reply as its query expects ($(gen_value "$v" nxdomain) NXDOMAIN, $(gen_value "$v" noerror) NOERROR in the max-rate run), none lost, ${REPLY_BYTES}-byte replies on average"
	elif [ -z "$problems" ]; then
		ANSWERS_OK=1
		ANSWERS_TEXT="all NOERROR with an answer, none lost, ${REPLY_BYTES}-byte replies on average"
	else
		ANSWERS_OK=0
		ANSWERS_TEXT="NOT all right${problems}"
		echo "$BENCH_NAME: warning: $tag: $ANSWERS_TEXT" >&2
	fi
}

# The figures of the last measure (plus RSS, set by the caller) as a list:
# max_qps lost cpu% us/query gen_cpu% fixed_qps p50 p99 p999 rss_kib dnsperf_qps.
figures() {
	echo "$MAX_QPS $MAX_LOST $SRV_CPU $US_PER_Q $GEN_CPU $FIXED_QPS $P50_US $P99_US $P999_US $RSS $DNSPERF_QPS"
}

report() { # label
	printf '%-9s max %7s QPS, lost %s, server CPU %s%% (%s us/query), generator CPU %s%% | at %s QPS: p50 %s us, p99 %s us, p99.9 %s us | RSS %s KiB | dnsperf %s QPS\n' \
		"$1" "$MAX_QPS" "$MAX_LOST" "$SRV_CPU" "$US_PER_Q" "$GEN_CPU" "$FIXED_QPS" "$P50_US" "$P99_US" "$P999_US" "$RSS" "$DNSPERF_QPS"
	[ "${ANSWERS_TEXT:-}" = "" ] || echo "          answers: $ANSWERS_TEXT"
}

# measure, then RSS, the answer check and the report line for one server.
measure_and_report() { # port tag pid
	measure "$1" "$2" "$3"
	RSS=$(rss_kib "$3")
	check_answers "$2"
	report "$2"
}

# What every localdns under test shares: one worker on 127.0.0.1:PORT, nothing
# but DNS (no node integration, Kubernetes, HTTP or control socket).
localdns_config_head() { # port
	cat <<EOF
listen:
  addresses: [127.0.0.1]
  port: $1
  workers: 1
interface: {manage: false}
nftables: {enabled: false}
kubernetes: {enabled: false}
health: {listen: ""}
metrics: {listen: ""}
control: {socket: ""}
log: {level: warn}
EOF
}

# What every Unbound peer shares: one thread on 127.0.0.1:PORT, in the
# foreground, no files, iterator only (no validation), a big receive buffer.
unbound_server_clause() { # port
	cat <<EOF
server:
  interface: 127.0.0.1
  port: $1
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
}

# The cold-miss peer's whole unbound.conf (miss_qps.sh, callgrind.sh's
# BENCH_CG_PEER): the server clause, "." forwarded to the NSD on $NPORT,
# no remote control.
unbound_miss_conf() { # port
	unbound_server_clause "$1"
	cat <<EOF
  do-not-query-localhost: no
forward-zone:
  name: "."
  forward-addr: 127.0.0.1@$NPORT
remote-control:
  control-enable: no
EOF
}

# localdns on a free PORT, pinned to the server CPU, with the config lines
# on stdin after localdns_config_head; returns once it answers $PROBE.
# Sets PORT and LPID.
start_localdns() {
	PORT=$(free_port)
	{
		localdns_config_head "$PORT"
		cat
	} >"$TMP/localdns.yaml"
	bench_server localdns "$BIN" --config "$TMP/localdns.yaml"
	LPID=$SPID
	wait_answer "$PORT" "$LPID" localdns
}

# The peer: Unbound, when installed, with unbound_server_clause, the lines
# on stdin and remote control off; once it answers $PROBE the function
# named by the argument measures it (called with its port and pid, then the
# arguments after its name), then it stops. Sets UVER ("" without Unbound).
run_unbound() { # measure_function [argument...]
	local unbound port pid
	unbound=$(command -v unbound || ls /usr/sbin/unbound 2>/dev/null || true)
	UVER=""
	if [ -z "$unbound" ]; then
		echo "unbound: not installed, no peer figure (apt-get install unbound)"
		return 0
	fi
	port=$(free_port)
	{
		unbound_server_clause "$port"
		cat
		printf 'remote-control:\n  control-enable: no\n'
	} >"$TMP/unbound.conf"
	bench_server unbound "$unbound" -d -c "$TMP/unbound.conf"
	pid=$SPID
	UVER=$("$unbound" -V 2>/dev/null | awk '/^Version/ {print $2; exit}')
	if wait_answer "$port" "$pid" unbound; then
		"$1" "$port" "$pid" "${@:2}"
	fi
	bench_stop "$pid"
}

# run_unbound's measure function for the scripts that serve their own data
# (static_qps.sh, srv_qps.sh): sets U (see figures) and U_ANSWERS
# (check_answers' text); both empty without Unbound.
U=()
U_ANSWERS=""
measure_unbound_answers() { # port pid
	measure_and_report "$1" unbound "$2"
	U_ANSWERS=$ANSWERS_TEXT
	read -r -a U < <(figures)
}

# The brief's 100% line: bare_responder on the server CPU, the same runs
# over $QUERIES, with the bare_responder options given (-a). Sets B (see
# figures) and B_ANSWERS (check_answers' text). It keeps running, on
# BARE_PORT as BARE_PID, for alternate_rounds; the exit trap stops it.
measure_bare() { # [bare_responder option...]
	BARE_PORT=$(free_port)
	bench_server bare "$BARE" -s 127.0.0.1 -p "$BARE_PORT" "$@"
	BARE_PID=$SPID
	B=()
	B_ANSWERS=""
	if wait_answer "$BARE_PORT" "$BARE_PID" bare; then
		measure_and_report "$BARE_PORT" bare "$BARE_PID"
		B_ANSWERS=$ANSWERS_TEXT
		read -r -a B < <(figures)
	fi
}

# The bare responder's -a for this mix: localdns's average reply size
# (bytes, from its max-rate run) less the bare responder's own over
# $QUERIES (header, question, one A record, or AAAA for an AAAA question),
# so both move the same bytes on average; 0 when that is under the
# smallest padding record (12 bytes).
bare_pad() { # localdns_avg_bytes
	python3 - "$QUERIES" "$1" <<'EOF'
import sys
sizes = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 2 or f[0][0] in ";#":
        continue
    name = f[0].rstrip(".")
    sizes.append(12 + len(name) + 2 + 4 + (28 if f[1].upper() == "AAAA" else 16))
pad = round(float(sys.argv[2]) - sum(sizes) / len(sizes))
print(pad if pad >= 12 else 0)
EOF
}

# The bare responder (with measure_bare's options), the alternating rounds
# against localdns (PORT, LPID), both stopped, and the ratio lines.
bare_rounds_and_ratio() { # [bare_responder option...]
	measure_bare "$@"
	alternate_rounds "$PORT" "$LPID"
	bench_stop "$BARE_PID"
	bench_stop "$LPID"
	bench_ratio
}

# localdns (on lport, pid lpid) and the bare responder (BARE_PORT, BARE_PID)
# take turns: ROUNDS max-rate runs of ROUND_SECS each, localdns first in
# each round. Both stay up (pinned to the same CPU; the one not measured
# sleeps), so each round compares two runs seconds apart on a machine whose
# load drifts. Sets ROUNDS_TEXT (empty with ROUNDS=0 or without the bare
# responder's figures) and prints it. ROUND_LABELS ("localdns;bare
# responder" unless set) names the two in it: dnstap_qps.sh sets it for
# localdns with dnstap against the same build without.
alternate_rounds() { # lport lpid
	local lport=$1 lpid=$2 r tag port pid c0 c1 out problems="" k
	local -a lq=() bq=() lc=() bc=() ln=() bn=()
	ROUNDS_TEXT=""
	[ "$ROUNDS" -gt 0 ] && [ "${#B[@]}" -gt 0 ] || return 0
	for r in $(seq 1 "$ROUNDS"); do
		for tag in localdns bare; do
			if [ "$tag" = localdns ]; then port=$lport pid=$lpid; else port=$BARE_PORT pid=$BARE_PID; fi
			out=$TMP/$tag-round$r.txt
			c0=$(cpu_ticks "$pid")
			gen "$out" -p "$port" -l "$ROUND_SECS" -c "$GEN_SOCKETS" -q "$GEN_OUTSTANDING" -t 2
			c1=$(cpu_ticks "$pid")
			for k in lost mismatched unexpected errors; do
				[ "$(gen_value "$out" "$k")" = 0 ] || problems="$problems; $tag round $r: $k $(gen_value "$out" "$k")"
			done
			if [ "$tag" = localdns ]; then
				lq+=("$(gen_value "$out" qps)") lc+=("$((c1 - c0))") ln+=("$(gen_value "$out" received)")
			else
				bq+=("$(gen_value "$out" qps)") bc+=("$((c1 - c0))") bn+=("$(gen_value "$out" received)")
			fi
		done
	done
	ROUNDS_TEXT=$(AR="${lq[*]};${bq[*]};${lc[*]};${bc[*]};${ln[*]};${bn[*]}" AR_SECS=$ROUND_SECS \
		AR_LABELS=${ROUND_LABELS:-localdns;bare responder} python3 - <<'EOF'
import os
lq, bq, lc, bc, ln, bn = ([float(x or 0) for x in part.split()] for part in os.environ["AR"].split(";"))
a, b = os.environ["AR_LABELS"].split(";")
q = [l / b if b else 0 for l, b in zip(lq, bq)]
# CPU per query: ticks / answered; the bare responder's over localdns's, so higher is better like q
u = [(b / nb) / (l / nl) if l and nl and nb else 0 for l, b, nl, nb in zip(lc, bc, ln, bn)]
print("%d alternating %s s max-rate rounds: %s / %s max QPS %s (%.2f-%.2f), "
      "%s's CPU per query / %s's %s (%.2f-%.2f); %s %s QPS, %s %s QPS"
      % (len(q), os.environ["AR_SECS"], a, b, ", ".join("%.2f" % x for x in q), min(q), max(q),
         b, a, ", ".join("%.2f" % x for x in u), min(u), max(u),
         a, " / ".join("{:,}".format(int(x)) for x in lq), b,
         " / ".join("{:,}".format(int(x)) for x in bq)))
EOF
)
	[ -z "$problems" ] || ROUNDS_TEXT="$ROUNDS_TEXT; NOT all right${problems}"
	echo "rounds: $ROUNDS_TEXT"
}

# The ratio lines: localdns (L) against Unbound (U) and the bare responder
# (B), whichever ran (see figures). RATIO_U_LABEL and RATIO_U_TARGET name
# the U peer and its target when it is not Unbound (dnstap_qps.sh).
bench_ratio() {
	BR_L="${L[*]}" BR_U="${U[*]}" BR_B="${B[*]}" BR_UL=${RATIO_U_LABEL:-unbound} \
		BR_UT=${RATIO_U_TARGET:->= 1.25} python3 - <<'EOF'
import os
L = os.environ["BR_L"].split()
for label, env, target in ((os.environ["BR_UL"], "BR_U", os.environ["BR_UT"]),
                           ("bare responder", "BR_B", ">= 0.90")):
    P = os.environ[env].split()
    if L and P and float(P[0]) > 0 and float(P[3]) > 0:
        print("localdns / %s: max QPS %.2f (target %s), CPU per query %.2f (lower is better)." % (
            label, float(L[0]) / float(P[0]), target, float(L[3]) / float(P[3])))
EOF
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
	DNSPERF=""
	if [ "$DNSPERF_TIME" != 0 ]; then
		DNSPERF=$(dnsperf -h 2>&1 | awk '/^Version/ {print $2; exit}')
	fi
}

# Rewrite the block between "<!-- MARKER:begin" and "<!-- MARKER:end -->" in
# $DOC: provenance, the table (localdns from L, Unbound from U and the bare
# responder from B, when they ran), the ratios, then any NOTE lines. Call
# bench_doc_meta first.
bench_write_doc() { # marker workload localdns-label unbound-label [note...]
	local marker=$1 workload=$2 llabel=$3 ulabel=$4 cross="no dnsperf cross-check"
	shift 4
	[ -z "$DNSPERF" ] || cross="dnsperf $DNSPERF for ${DNSPERF_TIME} s (-c 8 -q 500) as a cross-check"
	BD_MARKER=$marker BD_SCRIPT="$BENCH_NAME.sh" BD_NAME=$BENCH_NAME \
	BD_HEAD1="Measured $DATE on $NCPU CPUs ($CPU), Linux $KERNEL, commit $COMMIT;" \
	BD_HEAD2="dnsgen -c $GEN_SOCKETS, $PINNING; $workload; ${DURATION} s max-rate run (-q $GEN_OUTSTANDING), ${FIXED} s at ${RATE} QPS; $cross;" \
	BD_HEAD3="$BUSY_NOTE." \
	BD_LLABEL=$llabel BD_ULABEL=$ulabel BD_L="${L[*]}" BD_U="${U[*]}" BD_B="${B[*]}" \
	BD_RATIOS="$(bench_ratio)" \
	python3 - "$DOC" "$@" <<'EOF'
import os, sys
doc, notes = sys.argv[1], sys.argv[2:]
env = os.environ
marker, name = env["BD_MARKER"], env["BD_NAME"]
def row(label, v):
    # v: max_qps lost cpu% us/query gen_cpu% fixed_qps p50 p99 p999 rss_kib dnsperf_qps
    dnsperf = "{:,}".format(int(v[10])) if v[10].isdigit() else v[10]
    return "| %s | %s | %s | %s%% | %s | %s%% | %s | %s | %s | %.1f | %s |" % (
        label, "{:,}".format(int(float(v[0]))), v[1], v[2], v[3], v[4], v[6], v[7], v[8],
        int(v[9]) / 1024, dnsperf)
begin = "<!-- %s:begin" % marker
end = "<!-- %s:end -->" % marker
lines = [
    "%s (written by tests/bench/%s; do not edit by hand) -->" % (begin, env["BD_SCRIPT"]),
    env["BD_HEAD1"],
    env["BD_HEAD2"],
    env["BD_HEAD3"],
    "",
    "| server | max QPS | lost | server CPU | CPU us/query | generator CPU | p50 (us) | p99 (us) | p99.9 (us) | RSS (MiB) | dnsperf max QPS |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    row(env["BD_LLABEL"], env["BD_L"].split()),
]
for label, key in ((env["BD_ULABEL"], "BD_U"), ("bare responder (tests/bench/bare_responder.c)", "BD_B")):
    if env[key].split():
        lines.append(row(label, env[key].split()))
lines.append("")
if not env["BD_U"].split():
    lines.append("Unbound was not installed: no peer figure in this run.")
lines.extend(env["BD_RATIOS"].split("\n") if env["BD_RATIOS"] else [])
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

# ------------------------------------------------------------------ NSD, the upstream

# NSD (unpinned unless NSD_PIN says where; it only works during the
# warm-ups, except in miss_qps.sh) on 127.0.0.1 at a free
# port, one server process, no rate limiting, serving each zone from its
# file in $TMP, with nsd-control on a local socket for its query counter.
# Sets NPORT and NPID (killed on exit) and NSD_CONTROL; waits until it
# answers $PROBE.
nsd_start() { # zone file [zone file...]
	local nsd
	nsd=$(command -v nsd || ls /usr/sbin/nsd 2>/dev/null || true)
	[ -n "$nsd" ] || { echo "$BENCH_NAME: nsd not installed (make deps)" >&2; exit 1; }
	NSD_CONTROL=$(command -v nsd-control || ls /usr/sbin/nsd-control 2>/dev/null || true)
	NPORT=$(free_port)
	cat >"$TMP/nsd.conf" <<EOF
server:
  ip-address: 127.0.0.1@$NPORT
  do-ip6: no
  rrl-ratelimit: 0
  server-count: 1
  username: ""
  database: ""
  chroot: ""
  zonesdir: "$TMP"
  zonelistfile: "$TMP/nsd.zonelist"
  xfrdfile: "$TMP/nsd.xfrd"
  xfrdir: "$TMP"
  pidfile: ""
  logfile: "$TMP/nsd.log"
  verbosity: 0
remote-control:
  control-enable: yes
  control-interface: "$TMP/nsd.ctl"
EOF
	while [ $# -ge 2 ]; do
		printf 'zone:\n  name: "%s."\n  zonefile: "%s"\n' "$1" "$2" >>"$TMP/nsd.conf"
		shift 2
	done
	bench_spawn nsd "${NSD_PIN[@]}" "$nsd" -d -c "$TMP/nsd.conf"
	NPID=$SPID
	wait_answer "$NPORT" "$NPID" nsd
}

# The cold-miss upstream (miss_qps.sh, miss_arms.sh): NSD with a wildcard
# zone, *.miss.example. A (TTL 300), pinned with the generator when it is
# pinned, so that every name the benchmark makes up has an answer. Sets
# ZONE and PROBE, then what nsd_start sets.
miss_upstream_start() {
	ZONE=miss.example
	[ "${#GEN_PIN[@]}" -eq 0 ] || NSD_PIN=("${GEN_PIN[@]}")
	cat >"$TMP/zone.txt" <<EOF
\$ORIGIN $ZONE.
\$TTL 300
@ IN SOA ns.$ZONE. hostmaster.$ZONE. 1 3600 600 86400 300
@ IN NS ns
ns IN A 127.0.0.1
* IN A 192.0.2.1
EOF
	PROBE="probe.$ZONE A"
	nsd_start "$ZONE" zone.txt
}

# fresh_names FILE PREFIX COUNT: COUNT names of the cold-miss zone nobody
# asked, one A question each (PREFIX-NNNNNNN.miss.example A).
fresh_names() {
	python3 -c 'import sys; open(sys.argv[1], "w").write("".join("%s-%07d.miss.example A\n" % (sys.argv[2], i) for i in range(int(sys.argv[3]))))' "$@"
}

# Queries NSD has answered so far ("?" without nsd-control).
nsd_queries() {
	local n=""
	if [ -n "$NSD_CONTROL" ]; then
		n=$(timeout 5 "$NSD_CONTROL" -c "$TMP/nsd.conf" stats_noreset 2>/dev/null |
			awk -F= '$1 == "num.queries" {print $2}') || true
	fi
	echo "${n:-?}"
}
nsd_delta() { # before after
	if [ "$1" = "?" ] || [ "$2" = "?" ]; then echo "?"; else echo $(($2 - $1)); fi
}

# One pass over the first COUNT queries at WARM_RATE. Sets WARM_OK (1 when
# every one was answered NOERROR, or as its line expects with
# EXPECTATIONS=1), WARM_TEXT, WARM_UPSTREAM (queries NSD answered).
warm_up() { # port tag count
	local port=$1 tag=$2 count=$3 n0 n1 sent received lost ok what=NOERROR
	local f=$TMP/$tag-warm.txt
	n0=$(nsd_queries)
	gen "$f" -p "$port" -n "$count" -Q "$WARM_RATE" -l $((count / WARM_RATE + 30)) -c 8 -t 2
	n1=$(nsd_queries)
	sent=$(gen_value "$f" sent)
	received=$(gen_value "$f" received)
	lost=$(gen_value "$f" lost)
	if [ "$EXPECTATIONS" = 1 ]; then
		ok=$(gen_value "$f" expect_ok)
		what="as expected"
	else
		ok=$(gen_value "$f" noerror)
	fi
	WARM_UPSTREAM=$(nsd_delta "$n0" "$n1")
	WARM_TEXT="$ok/$count $what ($sent sent, $received answered, $lost lost; NSD answered $WARM_UPSTREAM)"
	if [ "$sent" = "$count" ] && [ "$received" = "$count" ] && [ "$ok" = "$count" ]; then
		WARM_OK=1
	else
		WARM_OK=0
		echo "$BENCH_NAME: warning: $tag warm-up incomplete: $WARM_TEXT" >&2
	fi
}

# Warm server $pid on $port, measure it, print its line. Sets RSS_START,
# RSS_WARM, RSS (after the runs), RUN_UPSTREAM (NSD queries during the
# measured runs), plus everything measure, warm_up and check_answers set.
run_server() { # port pid tag count
	local port=$1 pid=$2 tag=$3 count=$4 n0 n1
	RSS_START=$(rss_kib "$pid")
	warm_up "$port" "$tag" "$count"
	RSS_WARM=$(rss_kib "$pid")
	n0=$(nsd_queries)
	measure_and_report "$port" "$tag" "$pid"
	n1=$(nsd_queries)
	RUN_UPSTREAM=$(nsd_delta "$n0" "$n1")
	echo "          warm-up $WARM_TEXT; NSD answered $RUN_UPSTREAM during the runs; RSS $RSS_START KiB at start, $RSS_WARM KiB after it"
}

# run_unbound's measure function for the scripts whose answers come from
# NSD (cache_qps.sh, search_qps.sh): run_server with count warm-up queries;
# sets U (see figures) and U_WARM (WARM_OK WARM_TEXT RUN_UPSTREAM
# ANSWERS_TEXT RSS_START RSS_WARM); both empty without Unbound.
U_WARM=()
measure_unbound_warm() { # port pid count
	run_server "$1" "$2" unbound "$3"
	read -r -a U < <(figures)
	U_WARM=("$WARM_OK" "$WARM_TEXT" "$RUN_UPSTREAM" "$ANSWERS_TEXT" "$RSS_START" "$RSS_WARM")
}
