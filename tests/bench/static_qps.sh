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
#   - The server under test runs with one worker pinned to CPU 0; the load
#     generator, build/bench/dnsgen (tests/bench/dnsgen.c: sendmmsg and
#     recvmmsg batches on 8 sockets), is pinned to CPU 1 (taskset, when
#     there are two CPUs or more).
#   - Run 1, "max": dnsgen -l $BENCH_DURATION -q 500, as fast as the server
#     answers; we report QPS, lost queries, the generator's CPU, and the
#     server's own CPU time (utime+stime from /proc) per answered query,
#     which does not depend on how fast the generator is.
#   - Run 2, "fixed": dnsgen -Q $BENCH_RATE (20k QPS) for $BENCH_FIXED
#     seconds: p50/p99/p99.9 of every reply's latency.
#   - Run 3, the cross-check: dnsperf -c 8 -q 500 for $BENCH_DNSPERF (5)
#     seconds, its max QPS only (dnsperf itself tops out near 180k QPS).
#   - Both dnsgen runs must get every answer NOERROR with an answer, none
#     lost; the script warns and the doc says so otherwise.
#   - RSS of the server after the runs.
#   - Unbound 1.17 (Debian) gets the same names as local-data, one thread,
#     the same pinning and the same runs; then build/bench/bare_responder
#     (tests/bench/bare_responder.c, a canned reply the size of localdns's)
#     the same way: the brief's 100% line.
#   - Then localdns (still up, idle meanwhile) and the bare responder take
#     turns: $BENCH_ROUNDS (3) max-rate runs of $BENCH_ROUND_SECS (5) s each,
#     so each round's ratio compares two runs seconds apart (lib.sh,
#     alternate_rounds).
# Then the "Static answers" block of docs/performance.md is rewritten with
# the figures, date, machine and commit (BENCH_NO_DOC=1 leaves it alone).
#
# Everything is bounded (timeouts on every step) and every process this
# script starts is killed on exit. Traffic goes to 127.0.0.1 only. The
# helpers (servers, the dnsgen and dnsperf runs, the bare responder, the doc
# block) are in lib.sh, shared with cache_qps.sh.
set -euo pipefail

BIN=${1:?usage: static_qps.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
NAMES=${BENCH_NAMES:-1000}
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init static_qps

# ------------------------------------------------------------------ data
python3 "$HERE/mixes.py" static "$TMP" "$NAMES"
PROBE=$(head -1 "$TMP/queries.txt")

# ------------------------------------------------------------------ localdns
start_localdns <<EOF
cluster: {domain: cluster.local, ttl: 5s}
static:
  files: [records.yaml]
EOF
echo "localdns: $(basename "$BIN") pid $LPID on 127.0.0.1:$PORT, $NAMES names, workers 1, $PINNING"
measure_and_report "$PORT" localdns "$LPID"
L_ANSWERS=$ANSWERS_TEXT
read -r -a L < <(figures)
# localdns stays up (idle) for the alternating rounds with the bare responder

# ------------------------------------------------------------------ unbound
run_unbound measure_unbound_answers <"$TMP/unbound-data.conf"

# ------------------------------------------------------------------ bare responder
bare_rounds_and_ratio

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
bench_doc_meta
NOTES=("- Answers in the dnsgen runs: localdns $L_ANSWERS.")
[ -z "$U_ANSWERS" ] || NOTES+=("- Unbound: $U_ANSWERS.")
[ -z "$B_ANSWERS" ] || NOTES+=("- Bare responder: $B_ANSWERS.")
[ -z "$ROUNDS_TEXT" ] || NOTES+=("- Then $ROUNDS_TEXT.")
bench_write_doc static-answers "$NAMES names, A/AAAA mix" \
	"localdns ($COMMIT, workers 1)" "unbound $UVER (num-threads 1, local-data)" \
	"${NOTES[@]}"
