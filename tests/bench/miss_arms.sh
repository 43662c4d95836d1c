#!/usr/bin/env bash
# miss_arms.sh BIN — the cold-miss mix at one fixed rate, several servers
# ("arms") taking turns for many rounds, each arm's CPU per miss and latency
# against the first Unbound arm's with a 95 % confidence interval.
#
#   tests/bench/miss_arms.sh build/localdns
#   BENCH_ARMS="L64:64MiB:true L64n:64MiB:false U1" tests/bench/miss_arms.sh build/localdns   # seccomp off
#
# Why next to miss_qps.sh: that script's few alternating rounds move by a
# few percent from round to round, so a difference of 2 % (the latency line
# of docs/performance.md, "Where the targets stand") cannot be told from
# the machine's drift there. This one runs each arm once a round for
# $BENCH_ARMS_ROUNDS (16) rounds, the order rotated every round and reversed
# every len(arms) rounds, and gives each ratio as the geometric mean of the
# rounds' ratios with a t-interval, next to the same figure for a second
# Unbound (an A/A control: how far two identical servers read apart).
#
# Method:
#   - NSD serves *.miss.example. A on 127.0.0.1, pinned with the generator
#     (CPU 1); every arm is pinned to CPU 0 with all its threads, started
#     at once, and sleeps while the others are asked.
#   - BENCH_ARMS (default "L64:64MiB:true L8:8MiB:true U1 U2"): an arm whose
#     name starts with L is localdns (one worker, resolver auto) with that
#     cache.size and security.seccomp; one starting with U is Unbound 1.17
#     (num-threads 1, iterator only, forwarding "." to NSD: miss_qps.sh's
#     peer, its default caches). The first U arm is the reference.
#   - Every arm is first filled with new names at the full rate
#     ($BENCH_ARMS_FILL_L, 500,000, for localdns: a 64 MiB cache full;
#     $BENCH_ARMS_FILL_U, 150,000, for Unbound: its 4 MB message cache
#     full), so the rounds measure full caches evicting, as a node's would.
#   - A round asks each arm $BENCH_ARMS_RATE (18,000: about half Unbound's
#     max on the machine of docs/performance.md) new names a second for
#     $BENCH_ARMS_SECS (6) s with dnsgen (-c 8 -q 200): CPU per miss
#     (utime + stime of all its threads), p50/p90/p99 interpolated in
#     dnsgen's latency histogram (-H; its buckets are 1.1 % wide, so
#     uninterpolated medians move in steps of that), none lost.
#
# It writes nothing into docs/; docs/performance.md quotes its output.
# Everything is bounded and killed on exit; traffic goes to 127.0.0.1 only.
set -euo pipefail

BIN=${1:?usage: miss_arms.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
ARMS=${BENCH_ARMS:-L64:64MiB:true L8:8MiB:true U1 U2}
ARMS_ROUNDS=${BENCH_ARMS_ROUNDS:-16}
[ "$ARMS_ROUNDS" -ge 2 ] || { echo "miss_arms: BENCH_ARMS_ROUNDS must be at least 2 (an interval needs two rounds)" >&2; exit 2; }
ARMS_SECS=${BENCH_ARMS_SECS:-6}
ARMS_RATE=${BENCH_ARMS_RATE:-18000}
FILL_L=${BENCH_ARMS_FILL_L:-500000}
FILL_U=${BENCH_ARMS_FILL_U:-150000}
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init miss_arms
U_BIN=$(command -v unbound || ls /usr/sbin/unbound 2>/dev/null || true)
[ -n "$U_BIN" ] || { echo "miss_arms: unbound not installed (make bench installs it)" >&2; exit 1; }

miss_upstream_start
declare -a NAMES PORTS PIDS_OF FILLS
# Each localdns reads a config file of its own: the daemon reloads its file when it changes.
start_arm() { # name kind [cache seccomp]
	local name=$1 port
	port=$(free_port)
	if [ "${name:0:1}" = L ]; then
		{
			localdns_config_head "$port"
			cat <<EOF
upstream: {servers: ["127.0.0.1:$NPORT"], timeout: 2s, max_rate: 0, resolver: auto}
cache: {size: $2, max_ttl: 1d, prefetch: true}
security: {seccomp: $3}
EOF
		} >"$TMP/$name.yaml"
		bench_server "$name" "$BIN" --config "$TMP/$name.yaml"
		FILLS+=("$FILL_L")
	else
		unbound_miss_conf "$port" >"$TMP/$name.conf"
		bench_server "$name" "$U_BIN" -d -c "$TMP/$name.conf"
		FILLS+=("$FILL_U")
	fi
	wait_answer "$port" "$SPID" "$name"
	NAMES+=("$name") PORTS+=("$port") PIDS_OF+=("$SPID")
}
for arm in $ARMS; do
	IFS=: read -r name cache seccomp <<<"$arm"
	case $name in
	L*)
		if [ -z "$cache" ] || [ -z "$seccomp" ]; then
			echo "miss_arms: $arm: an L arm is NAME:CACHE:SECCOMP" >&2
			exit 2
		fi
		;;
	U*) ;;
	*) echo "miss_arms: $arm: a name starts with L (localdns) or U (Unbound)" >&2; exit 2 ;;
	esac
	start_arm "$name" "$cache" "$seccomp"
done
N=${#NAMES[@]}
echo "arms: ${NAMES[*]}; $PINNING, NSD on the generator's CPU; $BUSY_NOTE"

for j in $(seq 0 $((N - 1))); do
	QUERIES=$TMP/fill.txt
	fresh_names "$QUERIES" "fill$j" "${FILLS[$j]}"
	gen "$TMP/fill-$j.txt" -p "${PORTS[$j]}" -c "$GEN_SOCKETS" -t 2 -n "${FILLS[$j]}" -q 200 -l 120
	echo "filled ${NAMES[$j]}: $(gen_value "$TMP/fill-$j.txt" received) of ${FILLS[$j]} answered, RSS $(rss_kib "${PIDS_OF[$j]}") KiB"
done

PROBLEMS=""
: >"$TMP/runs"
for r in $(seq 1 "$ARMS_ROUNDS"); do
	for k in $(seq 0 $((N - 1))); do
		# every arm in every place: rotated each round, reversed every N rounds
		j=$(((k + r) % N))
		[ $((r / N % 2)) -eq 0 ] || j=$(((N - 1 - k + r) % N))
		QUERIES=$TMP/q.txt
		fresh_names "$QUERIES" "r${r}a$j" $((ARMS_RATE * ARMS_SECS + 1000))
		out=$TMP/${NAMES[$j]}-$r.txt
		c0=$(cpu_ticks "${PIDS_OF[$j]}")
		gen "$out" -p "${PORTS[$j]}" -c "$GEN_SOCKETS" -t 2 -l "$ARMS_SECS" -Q "$ARMS_RATE" -q 200 -H "$out.hist"
		c1=$(cpu_ticks "${PIDS_OF[$j]}")
		[ -n "$(gen_value "$out" received)" ] || { echo "miss_arms: dnsgen gave no result:" >&2; tail -5 "$out.err" >&2; exit 1; }
		for key in lost no_answer errors; do
			[ "$(gen_value "$out" "$key")" = 0 ] || PROBLEMS="$PROBLEMS; ${NAMES[$j]} round $r: $key $(gen_value "$out" "$key")"
		done
		echo "${NAMES[$j]} $r $((c1 - c0)) $(gen_value "$out" received)" >>"$TMP/runs"
		printf 'round %2s %-5s %s answered, CPU %s ticks, p50 %s us\n' "$r" "${NAMES[$j]}" \
			"$(gen_value "$out" received)" "$((c1 - c0))" "$(gen_value "$out" p50_us)"
	done
done

MA_TMP=$TMP MA_HZ=$CLK_TCK MA_NAMES="${NAMES[*]}" MA_RATE=$ARMS_RATE python3 - <<'EOF'
import collections, math, os, statistics

env = os.environ
tmp, hz, names = env["MA_TMP"], float(env["MA_HZ"]), env["MA_NAMES"].split()
ref = next(n for n in names if n.startswith("U"))

def histogram(path):
    h = collections.Counter()
    for line in open(path):
        ns, n = line.split()
        h[float(ns)] += int(n)
    return sorted(h.items())

def percentile_us(hist, p):
    """Interpolated between the bucket values around the p-th reply."""
    want, seen, below = p * sum(n for _, n in hist), 0, None
    for value, n in hist:
        if seen + n >= want:
            lo = value if below is None else below
            return (lo + (value - lo) * (want - seen) / n) / 1000
        seen, below = seen + n, value
    return hist[-1][0] / 1000

# Student's t for a two-sided 95 % interval, by degrees of freedom (1-30; more: 30's, a little wide).
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
       2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
       2.052, 2.048, 2.045, 2.042)

def interval(ratios):
    """Geometric mean of the rounds' ratios and its 95 % t-interval."""
    logs = [math.log(x) for x in ratios]
    mean = statistics.mean(logs)
    half = T95[min(len(logs) - 1, len(T95)) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)

rounds = collections.defaultdict(dict)
for line in open(tmp + "/runs"):
    name, r, ticks, received = line.split()
    hist = histogram("%s/%s-%s.txt.hist" % (tmp, name, r))
    fig = {"CPU us a miss": int(ticks) / hz * 1e6 / int(received)}
    for label, p in (("p50", .5), ("p90", .9), ("p99", .99)):
        fig[label] = percentile_us(hist, p)
    rounds[int(r)][name] = fig
complete = [r for r in rounds.values() if len(r) == len(names)]
print("\n%d rounds at %s new names a second; against %s, each arm's geometric mean of the rounds' "
      "ratios [95 %% interval] (rounds below 1):" % (len(complete), env["MA_RATE"], ref))
for metric in ("CPU us a miss", "p50", "p90", "p99"):
    print("%s:" % metric)
    for n in names:
        values = [r[n][metric] for r in complete]
        line = "  %-6s median %7.1f (%.1f-%.1f)" % (n, statistics.median(values), min(values), max(values))
        if n != ref:
            ratios = [r[n][metric] / r[ref][metric] for r in complete]
            g, lo, hi = interval(ratios)
            line += "   / %s %.3f [%.3f, %.3f] (%d of %d)" % (ref, g, lo, hi, sum(x < 1 for x in ratios), len(ratios))
        print(line)
EOF
[ -z "$PROBLEMS" ] || { echo "miss_arms: NOT all right:${PROBLEMS#;}" >&2; exit 1; }
