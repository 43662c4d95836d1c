#!/usr/bin/env bash
# dnstap_qps.sh BIN — what dnstap costs: cache hits answered with every
# query and every reply sent to a dnstap collector, against the same build
# with dnstap off (target: at least 0.85 of it, the brief's section 7).
#
#   tests/bench/dnstap_qps.sh build/localdns      (make bench runs it too)
#
# Method (docs/performance.md, "dnstap"):
#   - The cache mix of cache_qps.sh: NSD serves 10,000 names, the query file
#     asks for each once in a shuffled order; each localdns is warmed with
#     one pass, after which every measured query is a cache hit.
#   - Two localdns processes of this build, one worker each, both pinned to
#     CPU 0 (the one not measured sleeps): "tap" with dnstap.socket set (the
#     default messages, client_query and client_response: two messages per
#     query) to fstrm_capture writing to /dev/null, pinned with the
#     generator to CPU 1; and "off", without dnstap. The writer thread is
#     part of the tap process, so its encoding and writes count against it
#     on CPU 0.
#   - Each is measured as static_qps.sh measures a server (max-rate run,
#     fixed-rate run with p50/p99/p99.9, dnsperf cross-check), then they
#     take turns: $BENCH_ROUNDS (3) max-rate runs of $BENCH_ROUND_SECS (5) s
#     each (lib.sh, alternate_rounds), so each round's ratio compares two
#     runs seconds apart on a machine whose load drifts.
#   - Every query logged: at the end the tap process's exit log gives the
#     records it dropped (a full ring), and fstrm_capture the frames it
#     received; both are printed and written to the doc.
# Then the "dnstap" block of docs/performance.md is rewritten (BENCH_NO_DOC=1
# leaves it alone). Traffic goes to 127.0.0.1 only; every process this
# script starts is killed on exit.
set -euo pipefail

BIN=${1:?usage: dnstap_qps.sh BIN}
HERE=$(cd "$(dirname "$0")" && pwd)
NAMES=${BENCH_CACHE_NAMES:-10000}
WARM_RATE=${BENCH_WARM_RATE:-5000}
ZONE=bench.example
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init dnstap_qps
command -v fstrm_capture >/dev/null || { echo "dnstap_qps: fstrm_capture not installed (make deps)" >&2; exit 1; }

# ------------------------------------------------------------------ data, NSD, the collector
python3 "$HERE/mixes.py" cache "$TMP" "$NAMES"
PROBE=$(head -1 "$TMP/queries.txt")
nsd_start "$ZONE" zone.txt
SOCK=$TMP/tap.sock
bench_spawn collector "${GEN_PIN[@]}" fstrm_capture -t protobuf:dnstap.Dnstap -u "$SOCK" -w /dev/null
CPID=$SPID
for _ in $(seq 1 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { echo "dnstap_qps: fstrm_capture did not listen" >&2; exit 1; }

# ------------------------------------------------------------------ localdns with dnstap
# (as start_localdns, under a log of its own: $TMP/tap.log)
TAP_PORT=$(free_port)
{
	localdns_config_head "$TAP_PORT"
	cat <<EOF
upstream: {servers: ["127.0.0.1:$NPORT"], timeout: 2s}
cache: {size: 64MiB, max_ttl: 1d, prefetch: true}
dnstap: {socket: "$SOCK"}
EOF
} >"$TMP/tap.yaml"
bench_server tap "$BIN" --config "$TMP/tap.yaml"
TAP_PID=$SPID
wait_answer "$TAP_PORT" "$TAP_PID" tap
echo "localdns with dnstap: pid $TAP_PID on 127.0.0.1:$TAP_PORT, $NAMES cached names, workers 1, collector fstrm_capture -> /dev/null, $PINNING"
run_server "$TAP_PORT" "$TAP_PID" tap "$NAMES"
read -r -a L < <(figures)
TAP_WARM=$WARM_TEXT

# ------------------------------------------------------------------ the same build without
start_localdns <<EOF
upstream: {servers: ["127.0.0.1:$NPORT"], timeout: 2s}
cache: {size: 64MiB, max_ttl: 1d, prefetch: true}
EOF
echo "localdns without dnstap: pid $LPID on 127.0.0.1:$PORT"
run_server "$PORT" "$LPID" off "$NAMES"
read -r -a U < <(figures)
OFF_WARM=$WARM_TEXT
bench_stop "$NPID"

# ------------------------------------------------------------------ rounds
# alternate_rounds takes turns between L's server and B's: B is the one without.
BARE_PORT=$PORT BARE_PID=$LPID
B=("${U[@]}")
ROUND_LABELS="with dnstap;without" alternate_rounds "$TAP_PORT" "$TAP_PID"
B=()
bench_stop "$LPID"
bench_stop "$TAP_PID"
bench_stop "$CPID"
DROPPED=$(sed -n 's/.*msg="dnstap records dropped.*dropped_total=\([0-9]*\).*/\1/p' "$TMP/tap.log" | tail -1)
FRAMES=$(sed -n 's/.*wrote \([0-9]*\) frames.*/\1/p' "$TMP/collector.log" | tail -1)
LOGGED="the dnstap process dropped ${DROPPED:-0} records (full rings or failed writes; 0 = every query and reply was sent); fstrm_capture received ${FRAMES:-?} frames (two per query, plus its control frames)"
echo "dnstap: $LOGGED"

# ------------------------------------------------------------------ the doc
[ "${BENCH_NO_DOC:-0}" = 1 ] && exit 0
bench_doc_meta
NOTES=(
	"- Warm-up, one pass at $WARM_RATE QPS: with dnstap $TAP_WARM; without $OFF_WARM."
	"- Every query logged: $LOGGED."
)
[ -z "$ROUNDS_TEXT" ] || NOTES+=("- Then $ROUNDS_TEXT.")
export RATIO_U_LABEL="the same build without dnstap" RATIO_U_TARGET=">= 0.85"
bench_write_doc dnstap "$NAMES cached names (A, TTL 1 d) from NSD, all hits after one warm-up pass; every query and reply to fstrm_capture over a unix socket" \
	"localdns ($COMMIT, workers 1) with dnstap (client_query, client_response)" \
	"localdns ($COMMIT, workers 1) without dnstap" "${NOTES[@]}"
