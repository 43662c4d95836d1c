#!/usr/bin/env bash
# srv_qps.sh BIN — the SRV mix: 10,000 cluster names, more than half of
# them SRV with their targets' addresses in the additional section, from
# localdns's local records, against the bare responder (and Unbound from
# Debian as a peer when it is installed).
#
#   tests/bench/srv_qps.sh build/localdns      (make bench runs it too)
#
# Method (docs/performance.md, "SRV answers", says why):
#   - The names of the Kubernetes DNS specification for 2,500 ClusterIP
#     Services with two named ports and 500 headless Services with three
#     ready endpoints and one named port, in 10 namespaces, as static
#     records under cluster.local (the zone table answers them; no
#     Kubernetes, so no API server in the loop):
#       svc-NNNN.ns-NN.svc.cluster.local           A (the ClusterIP)
#       _http._tcp.svc-NNNN... / _https._tcp...    SRV 0 100 80|443 svc-NNNN...
#       hl-NNN.ns-NN.svc.cluster.local             A (three endpoints)
#       ep-K.hl-NNN.ns-NN.svc.cluster.local        A (one per endpoint)
#       _http._tcp.hl-NNN...                       SRV 0 33 8080 ep-K.hl-NNN... (three)
#     10,000 names; the query file asks each once with its type (5,500
#     SRV, 4,500 A), every reply NOERROR with an answer (checked). An SRV
#     answer carries its targets' A records (RFC 2782; localdns adds the
#     local ones), so a headless Service's is three SRV and three A.
#   - The file is in blocks of 16 questions of one shape (one length), the
#     blocks shuffled: dnsgen sends each block as one GSO message.
#   - The runs of static_qps.sh; Unbound gets the same records as
#     local-data (it adds no additional section); the bare responder's
#     replies are padded (-a) to localdns's average size; then localdns and
#     the bare responder take turns ($BENCH_ROUNDS rounds).
# Then the "SRV answers" block of docs/performance.md is rewritten
# (BENCH_NO_DOC=1 leaves it alone).
#
# Everything is bounded and every process this script starts is killed on
# exit. Traffic goes to 127.0.0.1 only. The helpers are in lib.sh.
set -euo pipefail

BIN=${1:?usage: srv_qps.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
SERVICES=${BENCH_SRV_SERVICES:-2500}
EXPECTATIONS=1
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init srv_qps

# ------------------------------------------------------------------ data
python3 "$HERE/mixes.py" srv "$TMP" "$SERVICES"
QUERY_COUNT=$(wc -l <"$TMP/queries.txt")
SRV_COUNT=$(awk '$2 == "SRV"' "$TMP/queries.txt" | wc -l)
PROBE=$(awk '$2 == "SRV" {print $1, $2; exit}' "$TMP/queries.txt")

# ------------------------------------------------------------------ localdns
start_localdns <<EOF
cluster: {domain: cluster.local, ttl: 5s}
static:
  files: [records.yaml]
EOF
echo "localdns: $(basename "$BIN") pid $LPID on 127.0.0.1:$PORT, $QUERY_COUNT names ($SRV_COUNT SRV), workers 1, $PINNING"
measure_and_report "$PORT" localdns "$LPID"
L_ANSWERS=$ANSWERS_TEXT
L_BYTES=$REPLY_BYTES
read -r -a L < <(figures)
# localdns stays up (idle) for the alternating rounds with the bare responder

# ------------------------------------------------------------------ unbound
run_unbound measure_unbound_answers <"$TMP/unbound-data.conf"

# ------------------------------------------------------------------ bare responder
PAD=$(bare_pad "$L_BYTES")
echo "bare responder: replies padded by $PAD bytes (-a), to localdns's $L_BYTES-byte average"
bare_rounds_and_ratio -a "$PAD"

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
bench_doc_meta
NOTES=("- Answers in the dnsgen runs: localdns $L_ANSWERS.")
[ -z "$U_ANSWERS" ] || NOTES+=("- Unbound (no additional section: its SRV replies are smaller): $U_ANSWERS.")
[ -z "$B_ANSWERS" ] || NOTES+=("- Bare responder (-a $PAD: its replies as large as localdns's on average): $B_ANSWERS.")
[ -z "$ROUNDS_TEXT" ] || NOTES+=("- Then $ROUNDS_TEXT.")
bench_write_doc srv-answers "$QUERY_COUNT cluster names from static records, $SRV_COUNT of them SRV (targets' A records in the additional section), the rest A" \
	"localdns ($COMMIT, workers 1)" "unbound $UVER (num-threads 1, local-data)" \
	"${NOTES[@]}"
