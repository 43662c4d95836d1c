#!/usr/bin/env bash
# miss_qps.sh BIN — the cold-miss mix: names never asked before, each a miss
# that goes through the resolver to the upstream, localdns against Unbound
# in the same run.
#
#   tests/bench/miss_qps.sh build/localdns      (make bench runs it too)
#
# Method (docs/performance.md, "Cold misses", says why):
#   - NSD serves a wildcard zone, *.miss.example. A (TTL 300), on 127.0.0.1
#     at a free port with no rate limiting, pinned to the generator's CPU
#     (CPU 1), so that the resolver's CPU is the resolver's alone.
#   - localdns (one worker) and Unbound 1.17 (num-threads 1, iterator only,
#     forwarding "." to that NSD) are both started, each pinned to CPU 0
#     with all its threads (taskset at start: every thread inherits it).
#   - Every query asks a name nobody asked before: each run has its own
#     query file of fresh names (<server><run>-<n>.miss.example A), longer
#     than the run can use, so every query misses every cache.
#   - Max-rate runs: dnsgen -c 8 -q $BENCH_MISS_OUTSTANDING (200) for
#     $BENCH_MISS_SECS (10) s; answered/s, the resolver's CPU (utime +
#     stime of all its threads, /proc/PID/stat) over the run, CPU per
#     answered miss, and its context switches per answered miss (all its
#     threads, /proc/PID/task/*/status).
#   - Then runs at a fixed rate of half Unbound's max (the median of its
#     max-rate runs above): p50 and p99 latency of a miss, and CPU per miss
#     at that rate. Each dnsgen writes its latency histogram (-H), and the
#     block also gives p50/p90/p99/p99.9 of every reply of a server's
#     rounds pooled (here and side by side): a round's p99 moves by twice
#     with the machine's millisecond stalls, a pooled one much less.
#   - Side by side: then $BENCH_MISS_ROUNDS rounds with both servers asked
#     at once, each by a dnsgen of its own at $BENCH_MISS_SIDE_RATE (5,000)
#     new names a second (half that fixed rate when it is less), over the
#     same seconds: CPU per miss, p50 and p99 of each. The machine's drift,
#     which moves the alternating runs by a quarter, falls on both alike
#     here, so these ratios hold to a few percent from round to round.
#   - Alternating: $BENCH_MISS_ROUNDS (3) rounds of each kind, localdns and
#     Unbound taking turns (the idle one sleeps on the same CPU), the order
#     swapped every round, so each round's ratio compares two runs seconds
#     apart on a machine whose speed drifts. The block gives the median and
#     range of every figure and each round's ratio, with how busy the
#     machine was before and the load average after.
#   - Every reply must be NOERROR with an answer and none lost (a warning,
#     and "NOT all right" in the block, otherwise).
# localdns runs with upstream.resolver $BENCH_MISS_RESOLVER (auto: on its
# one worker; own_thread measures the resolver thread's hand-over) and
# cache.size $BENCH_MISS_CACHE (64MiB, its default; Unbound keeps its
# defaults, 4 MB of messages and 4 MB of records: 8MiB compares the two
# at the same memory, where a flood's evictions touch less of it).
# Then the "Cold misses" block of docs/performance.md is rewritten
# (BENCH_NO_DOC=1 leaves it alone).
#
# Everything is bounded (timeouts on every step) and every process this
# script starts is killed on exit. Traffic goes to 127.0.0.1 only. The
# helpers are in lib.sh.
set -euo pipefail

BIN=${1:?usage: miss_qps.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
MISS_ROUNDS=${BENCH_MISS_ROUNDS:-3}
MISS_SECS=${BENCH_MISS_SECS:-10}
MISS_OUTSTANDING=${BENCH_MISS_OUTSTANDING:-200}
# localdns's cache.size: its default; Unbound keeps its own (msg 4m + rrset 4m)
MISS_CACHE=${BENCH_MISS_CACHE:-64MiB}
MISS_RESOLVER=${BENCH_MISS_RESOLVER:-auto}
MISS_SIDE_RATE=${BENCH_MISS_SIDE_RATE:-5000}
# names per max-rate query file: far more than a run gets through
MISS_NAMES=${BENCH_MISS_NAMES:-$((MISS_SECS * 80000))}
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init miss_qps

# ------------------------------------------------------------------ servers
miss_upstream_start
start_localdns <<EOF
upstream: {servers: ["127.0.0.1:$NPORT"], timeout: 2s, max_rate: 0, resolver: $MISS_RESOLVER}
cache: {size: $MISS_CACHE, max_ttl: 1d, prefetch: true}
EOF
L_PORT=$PORT
U_BIN=$(command -v unbound || ls /usr/sbin/unbound 2>/dev/null || true)
[ -n "$U_BIN" ] || { echo "miss_qps: unbound not installed (make bench installs it)" >&2; exit 1; }
U_PORT=$(free_port)
unbound_miss_conf "$U_PORT" >"$TMP/unbound.conf"
bench_server unbound "$U_BIN" -d -c "$TMP/unbound.conf"
UPID=$SPID
UVER=$("$U_BIN" -V 2>/dev/null | awk '/^Version/ {print $2; exit}')
wait_answer "$U_PORT" "$UPID" unbound
echo "localdns pid $LPID on 127.0.0.1:$L_PORT, unbound $UVER pid $UPID on 127.0.0.1:$U_PORT, NSD on 127.0.0.1:$NPORT; $PINNING, NSD on the generator's CPU"

# Context switches of every thread of pid so far.
ctxt_switches() {
	cat /proc/"$1"/task/*/status 2>/dev/null |
		awk '/^(non)?voluntary_ctxt_switches:/ {n += $2} END {print n + 0}'
}

# CPU ticks of NSD so far: its main process and those it forks (xfrd, the server).
nsd_ticks() {
	local p n=0
	for p in $(pgrep -f "$TMP/nsd.conf" 2>/dev/null || true); do
		n=$((n + $(cpu_ticks "$p")))
	done
	echo "$n"
}

# CPU ticks the whole machine spent so far (both CPUs, /proc/stat).
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }

# One run against tag's server: fresh names, dnsgen with the args given.
# Appends "received qps noerror lost cpu_ticks ctxt p50 p99 elapsed
# nsd_ticks machine_ticks gen_cpu_pct" to $TMP/TAG-KIND.runs and checks
# the answers.
PROBLEMS=""
# Every reply NOERROR with an answer, none lost, no name asked twice; else a PROBLEMS entry.
check_run() { # tag kind round dnsgen-output
	local tag=$1 kind=$2 round=$3 out=$4 k
	[ -n "$(gen_value "$out" received)" ] || { echo "miss_qps: dnsgen gave no result:" >&2; tail -5 "$out.err" >&2; exit 1; }
	for k in lost no_answer truncated mismatched unexpected errors; do
		[ "$(gen_value "$out" "$k")" = 0 ] || PROBLEMS="$PROBLEMS; $tag $kind run $round: $k $(gen_value "$out" "$k")"
	done
	[ "$(gen_value "$out" noerror)" = "$(gen_value "$out" received)" ] ||
		PROBLEMS="$PROBLEMS; $tag $kind run $round: $(gen_value "$out" received) answered, $(gen_value "$out" noerror) NOERROR"
	[ "$(gen_value "$out" sent)" -lt "$MISS_NAMES" ] ||
		PROBLEMS="$PROBLEMS; $tag $kind run $round: the query file ran out (names asked twice)"
}

miss_run() { # tag kind round dnsgen-args...
	local tag=$1 kind=$2 round=$3 port pid out c0 c1 x0 x1 n0 n1 m0 m1 k
	shift 3
	if [ "$tag" = localdns ]; then port=$L_PORT pid=$LPID; else port=$U_PORT pid=$UPID; fi
	QUERIES=$TMP/$tag-$kind$round-queries.txt
	fresh_names "$QUERIES" "${tag:0:1}$kind$round" "$MISS_NAMES"
	out=$TMP/$tag-$kind$round.txt
	c0=$(cpu_ticks "$pid")
	x0=$(ctxt_switches "$pid")
	n0=$(nsd_ticks)
	m0=$(machine_ticks)
	gen "$out" -p "$port" -c "$GEN_SOCKETS" -t 2 -H "$out.hist" "$@"
	c1=$(cpu_ticks "$pid")
	x1=$(ctxt_switches "$pid")
	n1=$(nsd_ticks)
	m1=$(machine_ticks)
	check_run "$tag" "$kind" "$round" "$out"
	echo "$(gen_value "$out" received) $(gen_value "$out" qps) $(gen_value "$out" noerror) $(gen_value "$out" lost) $((c1 - c0)) $((x1 - x0)) $(gen_value "$out" p50_us) $(gen_value "$out" p99_us) $(gen_value "$out" elapsed_s) $((n1 - n0)) $((m1 - m0)) $(gen_value "$out" gen_cpu_pct)" >>"$TMP/$tag-$kind.runs"
	printf '%-8s %-5s round %s: %s answered (%s/s), %s lost, CPU %s ticks, %s context switches, p50 %s us, p99 %s us; NSD %s ticks, dnsgen %s%%, machine %s ticks\n' \
		"$tag" "$kind" "$round" "$(gen_value "$out" received)" "$(gen_value "$out" qps)" \
		"$(gen_value "$out" lost)" "$((c1 - c0))" "$((x1 - x0))" "$(gen_value "$out" p50_us)" "$(gen_value "$out" p99_us)" \
		"$((n1 - n0))" "$(gen_value "$out" gen_cpu_pct)" "$((m1 - m0))"
}

# Rounds of one kind, localdns first in odd rounds, Unbound first in even ones.
alternate() { # kind dnsgen-args...
	local kind=$1 r
	shift
	for r in $(seq 1 "$MISS_ROUNDS"); do
		if [ $((r % 2)) = 1 ]; then
			miss_run localdns "$kind" "$r" "$@"
			miss_run unbound "$kind" "$r" "$@"
		else
			miss_run unbound "$kind" "$r" "$@"
			miss_run localdns "$kind" "$r" "$@"
		fi
	done
}

alternate max -l "$MISS_SECS" -q "$MISS_OUTSTANDING"
HALF=$(awk '{print $2}' "$TMP/unbound-max.runs" | sort -n | awk '{v[NR] = $1} END {printf "%d", v[int((NR + 1) / 2)] / 2}')
echo "fixed rate: $HALF new names a second (half Unbound's median max)"
alternate half -l "$MISS_SECS" -Q "$HALF" -q "$MISS_OUTSTANDING"

# Side by side: both servers at once, each asked by a dnsgen of its own at
# $BENCH_MISS_SIDE_RATE (5,000) new names a second, or half the fixed
# rate above when that is less (together, at most half Unbound's max), over
# the same seconds, so whatever else the machine does then falls on both
# alike. A fixed rate keeps blocks of different runs comparable: the ratio
# moves with the rate (batches amortize more at a higher one), and a rate
# taken from the max-rate runs moves with the machine. Appends "received
# ticks p50 p99" of localdns, then of Unbound, to $TMP/side.runs.
SIDE=$((HALF / 2))
[ "$MISS_SIDE_RATE" -ge "$SIDE" ] || SIDE=$MISS_SIDE_RATE
side_run() { # round
	local round=$1 lq uq lout uout lc0 lc1 uc0 uc1 lg ug
	lq=$TMP/localdns-side$round-queries.txt uq=$TMP/unbound-side$round-queries.txt
	lout=$TMP/localdns-side$round.txt uout=$TMP/unbound-side$round.txt
	fresh_names "$lq" "lside$round" "$MISS_NAMES"
	fresh_names "$uq" "uside$round" "$MISS_NAMES"
	lc0=$(cpu_ticks "$LPID") uc0=$(cpu_ticks "$UPID")
	QUERIES=$lq gen "$lout" -p "$L_PORT" -c "$GEN_SOCKETS" -t 2 -l "$MISS_SECS" -Q "$SIDE" -q "$MISS_OUTSTANDING" \
		-H "$lout.hist" &
	lg=$!
	QUERIES=$uq gen "$uout" -p "$U_PORT" -c "$GEN_SOCKETS" -t 2 -l "$MISS_SECS" -Q "$SIDE" -q "$MISS_OUTSTANDING" \
		-H "$uout.hist" &
	ug=$!
	wait "$lg" "$ug"
	lc1=$(cpu_ticks "$LPID") uc1=$(cpu_ticks "$UPID")
	check_run localdns side "$round" "$lout"
	check_run unbound side "$round" "$uout"
	echo "$(gen_value "$lout" received) $((lc1 - lc0)) $(gen_value "$lout" p50_us) $(gen_value "$lout" p99_us) $(gen_value "$uout" received) $((uc1 - uc0)) $(gen_value "$uout" p50_us) $(gen_value "$uout" p99_us)" >>"$TMP/side.runs"
	printf 'side by side round %s: localdns %s answered, CPU %s ticks, p50 %s us; unbound %s answered, CPU %s ticks, p50 %s us\n' \
		"$round" "$(gen_value "$lout" received)" "$((lc1 - lc0))" "$(gen_value "$lout" p50_us)" \
		"$(gen_value "$uout" received)" "$((uc1 - uc0))" "$(gen_value "$uout" p50_us)"
}
echo "side by side: $SIDE new names a second each"
for r in $(seq 1 "$MISS_ROUNDS"); do side_run "$r"; done
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
# The kernel's DAMON monitor (kdamond), where a machine runs it, takes a CPU
# for a millisecond or more at a time: enough to set a p99 (docs/performance.md).
DAMON_NOTE=""
grep -qsx on /sys/kernel/mm/damon/admin/kdamonds/*/state && DAMON_NOTE="; the kernel's DAMON monitor (kdamond) running"
L_RSS=$(rss_kib "$LPID")
U_RSS=$(rss_kib "$UPID")

# ------------------------------------------------------------------ figures
SUMMARY=$(MS_TMP=$TMP MS_HZ=$CLK_TCK MS_HALF=$HALF MS_SIDE=$SIDE MS_LRSS=$L_RSS MS_URSS=$U_RSS \
	MS_LLABEL="localdns ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown), workers 1, resolver $MISS_RESOLVER, cache $MISS_CACHE)" \
	MS_ULABEL="unbound $UVER (num-threads 1, iterator)" python3 - <<'EOF'
import glob, os
env = os.environ
tmp, hz = env["MS_TMP"], float(env["MS_HZ"])

def runs(tag, kind):
    out = []
    for line in open("%s/%s-%s.runs" % (tmp, tag, kind)):
        rec, qps, noerr, lost, ticks, ctxt, p50, p99, secs, nsd, machine, gen = line.split()
        rec = int(rec) or 1
        secs = float(secs)
        # what else ran: the machine's CPU less the server's, NSD's and dnsgen's
        other = int(machine) / hz - int(ticks) / hz - int(nsd) / hz - float(gen) / 100 * secs
        out.append({"qps": float(qps), "cpu_pct": 100 * int(ticks) / hz / secs,
                    "us": int(ticks) / hz * 1e6 / rec, "cs": int(ctxt) / rec,
                    "p50": float(p50), "p99": float(p99), "other": 100 * max(other, 0) / secs})
    return out

def med(v):
    v = sorted(v)
    return v[(len(v) - 1) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

def span(v, fmt):
    return "%s (%s-%s)" % (fmt % med(v), fmt % min(v), fmt % max(v))

R = {(t, k): runs(t, k) for t in ("localdns", "unbound") for k in ("max", "half")}
rows = []
for tag, label, rss in (("localdns", env["MS_LLABEL"], env["MS_LRSS"]),
                        ("unbound", env["MS_ULABEL"], env["MS_URSS"])):
    m, h = R[(tag, "max")], R[(tag, "half")]
    rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %.1f |" % (
        label, span([r["qps"] for r in m], "%.0f"), span([r["cpu_pct"] for r in m], "%.0f%%"),
        span([r["us"] for r in m], "%.1f"), span([r["cs"] for r in m], "%.2f"),
        span([r["us"] for r in h], "%.1f"), span([r["p50"] for r in h], "%.0f"),
        span([r["p99"] for r in h], "%.0f"), int(rss) / 1024))

def ratios(kind, key, invert=False):
    out = []
    for l, u in zip(R[("localdns", kind)], R[("unbound", kind)]):
        out.append(u[key] / l[key] if invert else l[key] / u[key])
    return ", ".join("%.2f" % x for x in out)

print("| resolver | answered/s | resolver CPU | CPU us per answered miss | context switches per miss "
      "| CPU us per miss at %s/s | p50 us at %s/s | p99 us at %s/s | RSS after (MiB) |"
      % (env["MS_HALF"], env["MS_HALF"], env["MS_HALF"]))
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
print("\n".join(rows))
print()
other = [r["other"] for v in R.values() for r in v]
print("Other work on the machine during the runs (both CPUs' busy time less the resolver's, NSD's and "
      "dnsgen's): %s of one CPU." % span(other, "%.0f%%"))
print()
print("localdns / Unbound, round by round (each pair of runs seconds apart): answered/s %s; "
      "CPU per answered miss %s (at most 1.00 is the target); at half Unbound's rate, CPU per miss %s, "
      "p50 %s, p99 %s." % (ratios("max", "qps"), ratios("max", "us"), ratios("half", "us"),
                           ratios("half", "p50"), ratios("half", "p99")))
side = []
for line in open("%s/side.runs" % tmp):
    v = line.split()
    side.append([{"us": int(v[i + 1]) / hz * 1e6 / (int(v[i]) or 1), "p50": float(v[i + 2]),
                  "p99": float(v[i + 3])} for i in (0, 4)])

def pooled(tag, kind):
    """Every reply of tag's rounds of kind in one histogram (dnsgen -H)."""
    hist = {}
    for path in glob.glob("%s/%s-%s[0-9]*.txt.hist" % (tmp, tag, kind)):
        for line in open(path):
            ns, n = (int(x) for x in line.split())
            hist[ns] = hist.get(ns, 0) + n
    return sorted(hist.items())

def percentile_us(hist, p):
    total = sum(n for _, n in hist)
    want, seen = min(int(p * total), total - 1), 0
    for ns, n in hist:
        seen += n
        if seen > want:
            return ns / 1000
    return 0.0

TAIL = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))

def tail_line(kind):
    l, u = pooled("localdns", kind), pooled("unbound", kind)
    lv, uv = [percentile_us(l, p) for _, p in TAIL], [percentile_us(u, p) for _, p in TAIL]
    return ("%s: localdns %s us against Unbound's %s (ratios %s)" % (
        " / ".join(k for k, _ in TAIL), " / ".join("%.0f" % v for v in lv),
        " / ".join("%.0f" % v for v in uv),
        ", ".join("%.2f" % (a / b if b else 0) for a, b in zip(lv, uv))))

print()
print("Side by side, both at once at %s new names a second each over the same seconds: CPU us per "
      "miss %s against %s; p50 %s against %s us; localdns / Unbound round by round: CPU per miss %s, "
      "p50 %s, p99 %s." % (
          env["MS_SIDE"], span([l["us"] for l, u in side], "%.1f"),
          span([u["us"] for l, u in side], "%.1f"), span([l["p50"] for l, u in side], "%.0f"),
          span([u["p50"] for l, u in side], "%.0f"),
          ", ".join("%.2f" % (l["us"] / u["us"]) for l, u in side),
          ", ".join("%.2f" % (l["p50"] / u["p50"]) for l, u in side),
          ", ".join("%.2f" % (l["p99"] / u["p99"]) for l, u in side)))
print()
print("Every reply of a kind's rounds pooled into one histogram per server (a percentile of all "
      "of them, steadier than a median of each round's): at half Unbound's rate %s; side by side "
      "%s." % (tail_line("half"), tail_line("side")))
EOF
)
echo "$SUMMARY"
[ -z "$PROBLEMS" ] || echo "miss_qps: warning: NOT all right$PROBLEMS" >&2

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
bench_doc_meta
NOTE="- Every reply NOERROR with an answer, none lost, no name asked twice."
[ -z "$PROBLEMS" ] || NOTE="- NOT all right$PROBLEMS."
MS_BEGIN="<!-- cold-misses:begin (written by tests/bench/miss_qps.sh; do not edit by hand) -->" \
MS_HEAD="Measured $DATE on $NCPU CPUs ($CPU), Linux $KERNEL, commit $COMMIT; $PINNING, NSD (wildcard zone, no rate limit) on CPU 1 too; dnsgen -c $GEN_SOCKETS, $MISS_ROUNDS alternating rounds of $MISS_SECS s max-rate runs (-q $MISS_OUTSTANDING) and $MISS_ROUNDS of $MISS_SECS s at $HALF new names a second, then $MISS_ROUNDS of $MISS_SECS s side by side at $SIDE each, every name new; $BUSY_NOTE, load average $LOAD after$DAMON_NOTE." \
MS_BODY="$SUMMARY" MS_NOTE="$NOTE" python3 - "$DOC" <<'EOF'
import os, sys
doc, env = sys.argv[1], os.environ
begin, end = "<!-- cold-misses:begin", "<!-- cold-misses:end -->"
block = "\n".join([env["MS_BEGIN"], env["MS_HEAD"], "", env["MS_BODY"], "", env["MS_NOTE"], end])
text = open(doc).read()
b, e = text.find(begin), text.find(end)
if b < 0 or e < 0:
    sys.exit("miss_qps: %s has no cold-misses markers; not updated" % doc)
open(doc, "w").write(text[:b] + block + text[e + len(end):])
print("miss_qps: updated %s" % doc)
EOF
