#!/usr/bin/env bash
# search_qps.sh BIN — the NXDOMAIN-heavy mix: what a pod's ndots:5 search
# path makes of lookups of external names, answered by localdns from its
# cluster zone and its answer cache, against the bare responder (and
# Unbound from Debian as a peer when it is installed).
#
#   tests/bench/search_qps.sh build/localdns      (make bench runs it too)
#
# Method (docs/performance.md, "Search-path expansion", says why):
#   - A pod's resolv.conf, as on a managed cluster: "search
#     <ns>.svc.cluster.local svc.cluster.local cluster.local c.corp.internal
#     corp.internal", "options ndots:5". Looking up an external name such as
#     h0042.bench.example (two dots, fewer than five) asks, in turn,
#     h0042.bench.example.<ns>.svc.cluster.local, ...svc.cluster.local and
#     ...cluster.local (NXDOMAIN from localdns's own cluster zone, with its
#     SOA), ...c.corp.internal and ...corp.internal (NXDOMAIN from the
#     upstream, then from localdns's cache), and finally h0042.bench.example
#     itself (the answer, from the cache): five NXDOMAIN and one answer,
#     each for A and AAAA, as glibc asks both.
#   - 1,000 such names (BENCH_SEARCH_NAMES), from pods in 10 namespaces:
#     12,000 questions, 10,000 of them NXDOMAIN. Each line of the query file
#     says which reply it expects, and every reply is checked (dnsgen).
#   - The file runs in rounds of 32 lookups walking their search lists in
#     step (as many pods at once would): the 64 questions of one step have
#     one length, so dnsgen sends them as one GSO message and stays cheaper
#     than the server.
#   - NSD serves bench.example. (A and AAAA for every name) and
#     corp.internal. (no names: NXDOMAIN with its SOA, negative TTL 1 h);
#     localdns forwards to it with its cluster zone local (no Kubernetes:
#     static_owns_cluster_domain), one worker pinned to CPU 0, dnsgen on
#     CPU 1. Warm-up: one pass over the file at $BENCH_WARM_RATE (5,000)
#     QPS; NSD's query counter must not move during the measured runs
#     (every external question a cache hit).
#   - The runs of static_qps.sh (max rate, 20k QPS, the dnsperf
#     cross-check), then Unbound (local-zone cluster.local static with the
#     same SOA, forwarding to the same NSD), then the bare responder with
#     its replies padded (-a) to localdns's average size, then localdns and
#     the bare responder taking turns ($BENCH_ROUNDS rounds).
# Then the "Search-path expansion" block of docs/performance.md is
# rewritten (BENCH_NO_DOC=1 leaves it alone).
#
# Everything is bounded and every process this script starts is killed on
# exit. Traffic goes to 127.0.0.1 only. The helpers are in lib.sh.
set -euo pipefail

BIN=${1:?usage: search_qps.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
NAMES=${BENCH_SEARCH_NAMES:-1000}
WARM_RATE=${BENCH_WARM_RATE:-5000}
EXPECTATIONS=1
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init search_qps

# ------------------------------------------------------------------ data
python3 "$HERE/mixes.py" search "$TMP" "$NAMES"
QUERY_COUNT=$(wc -l <"$TMP/queries.txt")
# An answered name: wait_answer looks for a non-empty answer.
PROBE=$(awk '$3 == "NOERROR" {print $1, $2; exit}' "$TMP/queries.txt")

# ------------------------------------------------------------------ NSD
nsd_start bench.example bench.zone corp.internal corp.zone

# ------------------------------------------------------------------ localdns
start_localdns <<EOF
cluster: {domain: cluster.local, ttl: 5s}
upstream: {servers: ["127.0.0.1:$NPORT"], timeout: 2s}
cache: {size: 64MiB, max_ttl: 1d, prefetch: true}
EOF
echo "localdns: $(basename "$BIN") pid $LPID on 127.0.0.1:$PORT, $NAMES names searched ($QUERY_COUNT questions; NSD on 127.0.0.1:$NPORT), workers 1, $PINNING"
run_server "$PORT" "$LPID" localdns "$QUERY_COUNT"
read -r -a L < <(figures)
L_WARM=("$WARM_OK" "$WARM_TEXT" "$RUN_UPSTREAM" "$ANSWERS_TEXT" "$REPLY_BYTES")
# localdns stays up (idle) for the alternating rounds with the bare responder

# ------------------------------------------------------------------ unbound
run_unbound measure_unbound_warm "$QUERY_COUNT" <<EOF
  do-not-query-localhost: no
  prefetch: yes
  local-zone: "cluster.local." static
  local-data: "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"
forward-zone:
  name: "."
  forward-addr: 127.0.0.1@$NPORT
EOF
bench_stop "$NPID"

# ------------------------------------------------------------------ bare responder
PAD=$(bare_pad "${L_WARM[4]}")
echo "bare responder: replies padded by $PAD bytes (-a), to localdns's ${L_WARM[4]}-byte average"
bare_rounds_and_ratio -a "$PAD"

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
bench_doc_meta
NOTES=("- Warm-up, one pass at $WARM_RATE QPS: localdns ${L_WARM[1]}.")
NOTES+=("- NSD answered ${L_WARM[2]} queries during the measured runs of localdns (0 = every external question was a cache hit).")
NOTES+=("- Answers in the measured dnsgen runs: localdns ${L_WARM[3]}.")
if [ "${#U_WARM[@]}" -gt 0 ]; then
	NOTES+=("- Unbound: warm-up ${U_WARM[1]}; NSD answered ${U_WARM[2]} during its measured runs; ${U_WARM[3]}.")
fi
[ -z "$B_ANSWERS" ] || NOTES+=("- Bare responder (-a $PAD: its replies as large as localdns's on average): $B_ANSWERS.")
[ -z "$ROUNDS_TEXT" ] || NOTES+=("- Then $ROUNDS_TEXT.")
bench_write_doc search-path "$NAMES external names through a 5-domain ndots:5 search list, A and AAAA ($QUERY_COUNT questions, 5 of 6 NXDOMAIN: 3 from the cluster zone, 2 cached from NSD)" \
	"localdns ($COMMIT, workers 1)" "unbound $UVER (num-threads 1, local-zone static, forwarding to NSD)" \
	"${NOTES[@]}"
