#!/usr/bin/env bash
# cache_qps.sh BIN — cache-hit throughput and latency of localdns (external
# names answered from its answer cache), with Unbound from Debian as a peer
# when it is installed.
#
#   tests/bench/cache_qps.sh build/localdns      (make bench runs it too)
#
# Method (docs/performance.md says why):
#   - NSD serves bench.example. on 127.0.0.1 (a free port) with 10,000 names
#     h00000.bench.example. ... h09999.bench.example., one A record each,
#     TTL 1 day. The query file asks for all 10,000 A records in a fixed
#     shuffled order.
#   - localdns forwards to that NSD (upstream.servers), one worker pinned to
#     CPU 0; the generator, build/bench/dnsgen, is pinned to CPU 1 (taskset,
#     when there are two CPUs or more). NSD is not pinned; it only works
#     during the warm-up.
#   - Warm-up: one pass over the 10,000 names (dnsgen -n 10000) at
#     $BENCH_WARM_RATE (5,000) QPS; every one must come back NOERROR. After
#     it every name is in the cache for a day, so each measured query is a
#     hit: NSD's own query counter (nsd-control over a local socket) is read
#     before and after the measured runs and printed, and should not move.
#   - Run 1, "max", run 2, "fixed" (20k QPS, p50/p99/p99.9) and the dnsperf
#     cross-check: the same runs as static_qps.sh, over the 10,000-name hot
#     set, with the server's CPU time per answered query from /proc.
#   - RSS of the server just after start, after the warm-up (10,000 names
#     cached) and after the runs.
#   - Unbound 1.17 (Debian), one thread, the same pinning, forwarding "." to
#     the same NSD, warmed the same way, the same runs; then the bare
#     responder (no warm-up: it knows no names) the same way.
#   - Then localdns (still up, idle meanwhile) and the bare responder take
#     turns: $BENCH_ROUNDS (3) max-rate runs of $BENCH_ROUND_SECS (5) s each,
#     so each round's ratio compares two runs seconds apart (lib.sh,
#     alternate_rounds).
# Then the "Cache hits" block of docs/performance.md is rewritten with the
# figures, date, machine and commit (BENCH_NO_DOC=1 leaves it alone).
#
# Everything is bounded (timeouts on every step) and every process this
# script starts is killed on exit. Traffic goes to 127.0.0.1 only. The
# helpers are in lib.sh, shared with static_qps.sh.
set -euo pipefail

BIN=${1:?usage: cache_qps.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
NAMES=${BENCH_CACHE_NAMES:-10000}
WARM_RATE=${BENCH_WARM_RATE:-5000}
ZONE=bench.example
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init cache_qps

# ------------------------------------------------------------------ data
python3 "$HERE/mixes.py" cache "$TMP" "$NAMES"
PROBE=$(head -1 "$TMP/queries.txt")

# ------------------------------------------------------------------ NSD
nsd_start "$ZONE" zone.txt

# ------------------------------------------------------------------ localdns
start_localdns <<EOF
upstream: {servers: ["127.0.0.1:$NPORT"], timeout: 2s}
cache: {size: 64MiB, max_ttl: 1d, prefetch: true}
EOF
echo "localdns: $(basename "$BIN") pid $LPID on 127.0.0.1:$PORT, $NAMES cached names (NSD on 127.0.0.1:$NPORT), workers 1, $PINNING"
run_server "$PORT" "$LPID" localdns "$NAMES"
read -r -a L < <(figures)
L_WARM=("$WARM_OK" "$WARM_TEXT" "$RUN_UPSTREAM" "$ANSWERS_TEXT" "$RSS_START" "$RSS_WARM")
# localdns stays up (idle) for the alternating rounds with the bare responder

# ------------------------------------------------------------------ unbound
run_unbound measure_unbound_warm "$NAMES" <<EOF
  do-not-query-localhost: no
  prefetch: yes
forward-zone:
  name: "."
  forward-addr: 127.0.0.1@$NPORT
EOF
bench_stop "$NPID"

# ------------------------------------------------------------------ bare responder
bare_rounds_and_ratio

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
bench_doc_meta
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }
if [ "${#U_WARM[@]}" -gt 0 ]; then
	NOTES=(
		"- Warm-up, one pass at $WARM_RATE QPS: localdns ${L_WARM[1]}; Unbound ${U_WARM[1]}."
		"- NSD answered ${L_WARM[2]} queries during the measured runs of localdns and ${U_WARM[2]} during those of Unbound (0 = every measured query was a cache hit)."
		"- Answers in the measured dnsgen runs: localdns ${L_WARM[3]}; Unbound ${U_WARM[3]}."
		"- RSS with the $NAMES names cached (after the warm-up, before the runs): localdns $(mib "${L_WARM[5]}") MiB ($(mib "${L_WARM[4]}") MiB just after start; cache.size 64MiB), Unbound $(mib "${U_WARM[5]}") MiB ($(mib "${U_WARM[4]}") MiB just after start)."
	)
else
	NOTES=(
		"- Warm-up, one pass at $WARM_RATE QPS: localdns ${L_WARM[1]}."
		"- NSD answered ${L_WARM[2]} queries during the measured runs of localdns (0 = every measured query was a cache hit)."
		"- Answers in the measured dnsgen runs: localdns ${L_WARM[3]}."
		"- RSS with the $NAMES names cached (after the warm-up, before the runs): localdns $(mib "${L_WARM[5]}") MiB ($(mib "${L_WARM[4]}") MiB just after start; cache.size 64MiB)."
	)
fi
[ -z "$B_ANSWERS" ] || NOTES+=("- Bare responder: $B_ANSWERS.")
[ -z "$ROUNDS_TEXT" ] || NOTES+=("- Then $ROUNDS_TEXT.")
bench_write_doc cache-hits "$NAMES cached names (A, TTL 1 d) from NSD, all hits after one warm-up pass" \
	"localdns ($COMMIT, workers 1)" "unbound $UVER (num-threads 1, forwarding to NSD)" \
	"${NOTES[@]}"
