#!/usr/bin/env bash
# callgrind.sh BIN [MIX...] — user-space instructions per query for each
# benchmark mix (static, cache, search, srv; all four by default; and miss,
# only when named), counted by valgrind's callgrind: the measure to decide
# by on a shared machine, where throughput moves with other people's work
# and instruction counts do not.
#
#   tests/bench/callgrind.sh build/localdns            all four mixes
#   tests/bench/callgrind.sh build/localdns search     one
#   tests/bench/callgrind.sh build/localdns miss       the miss path
#   BENCH_CG_PASSES=2 BENCH_CG_KEEP=/tmp/cg tests/bench/callgrind.sh ...
#
# For each mix: the data of the throughput scripts (tests/bench/mixes.py),
# localdns under callgrind with one worker (security.seccomp off: valgrind
# makes system calls of its own), NSD as the upstream for the cache and
# search mixes and a warm-up pass (again, up to three, until every reply
# was right), then the counters are zeroed
# (callgrind_control), dnsgen asks the whole query file $BENCH_CG_PASSES
# (1) times with 64 queries in flight (so the worker reads batches, as
# under load), every reply checked, and the counters are dumped. Printed
# per query: the worker thread's instructions (server_worker_main, inclusive:
# epoll, the recvmmsg and sendmmsg wrappers, everything around the
# queries), those of its UDP drain (server_udp_drain, _polled) and of the
# query path (query_prepare, query_handle_prepared, query_handle), and the functions
# with the most instructions of their own. The kernel's work (most of a
# query's CPU: performance.md, "Where a UDP query's CPU goes") is not
# counted; perf shows it.
#
# The miss mix is the cache mix's names (BENCH_CG_MISS_NAMES of them,
# 3,000 by default) asked once each from a cold cache, at a fixed
# BENCH_CG_MISS_RATE (200) a second so that every request wakes the
# resolver on its own, as a trickle of new names does: each query is a
# miss that goes through the request ring, the flight table, libunbound
# and NSD, into the cache and back. Printed besides: the resolver's
# instructions (inclusive, libunbound's work included: resolver_main on
# its own thread, or upstream_host_turn and upstream_host_ask where it
# runs on the worker, upstream.resolver, which the worker's figure then
# includes, and the UDP drain's does not) and the
# whole process's (every thread).
#
# BENCH_CG_MISS_FILL=N asks N other new names first (at
# BENCH_CG_MISS_FILL_RATE, 1000 a second), before the counters are zeroed,
# so that the caches are counted as a flood leaves them: full, each insert
# evicting an entry (from a cold start Unbound's 4 MiB caches evict
# nothing in 3,000 names, while libunbound inside localdns, whose message
# cache is kept empty, evicts at every store); BENCH_CG_MISS_CACHE sets
# localdns's cache.size for the mix (64MiB; 8MiB is what Unbound's two
# caches hold together: with BENCH_CG_MISS_FILL=60000 both evict once an
# insert, as callgrind's remove_entry and reclaim_space counts show).
#
# BENCH_CG_PEER=UNBOUND (make unbound-daemon: the daemon of libunbound's
# own source, with its symbols) runs the miss mix through that Unbound too,
# num-threads 1 and the iterator, forwarding to the same NSD, as miss_qps.sh
# configures it, and prints its instructions per miss, then the functions
# whose own instructions per miss differ most between the two (by name:
# libunbound's code is the daemon's, so what is left is what each does
# around it).
#
# BENCH_CG_KEEP=DIR keeps each mix's callgrind output there (for
# callgrind_annotate or kcachegrind). Nothing is written to the doc.
set -euo pipefail

BIN=${1:?usage: callgrind.sh BIN [static|cache|search|srv|miss ...]}
shift
MIXES=("$@")
[ "${#MIXES[@]}" -gt 0 ] || MIXES=(static cache search srv)
HERE=$(cd "$(dirname "$0")" && pwd)
PASSES=${BENCH_CG_PASSES:-1}
WARM_RATE=${BENCH_WARM_RATE:-500} # localdns under valgrind is slow
MISS_NAMES=${BENCH_CG_MISS_NAMES:-3000}
MISS_RATE=${BENCH_CG_MISS_RATE:-200}
MISS_FILL=${BENCH_CG_MISS_FILL:-0}
MISS_FILL_RATE=${BENCH_CG_MISS_FILL_RATE:-1000}
MISS_CACHE=${BENCH_CG_MISS_CACHE:-64MiB}
TOP=${BENCH_CG_TOP:-15}
# shellcheck source=tests/bench/lib.sh
. "$HERE/lib.sh"
bench_init callgrind
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
	{ echo "callgrind: valgrind not installed (apt-get install valgrind)" >&2; exit 1; }
# valgrind is slow: dnsgen gets longer to wait for a reply
GEN_PIN=()

# The per-query report of one callgrind dump: total queries, then lines.
report_dump() { # file queries mix
	callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null >"$1.incl"
	callgrind_annotate --inclusive=no --threshold=100 "$1" 2>/dev/null >"$1.self"
	python3 - "$1" "$2" "$3" "$TOP" <<'EOF'
import re, sys
path, queries, mix, top = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
row = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)(?:\s+\[[^\]]*\])?$")
def rows(kind):
    out = []
    for line in open(path + "." + kind):
        m = row.match(line)
        if m and ":" in m.group(2):
            out.append((int(m.group(1).replace(",", "")), m.group(2).split(":", 1)[1]))
    return out
incl = {}
for n, fn in rows("incl"):
    incl[fn] = max(n, incl.get(fn, 0))
per = lambda n: n / queries
# A worker drains its sockets in or out of its epoll set, and answers a
# batch's queries through query_prepare and query_handle_prepared (a lone
# query through query_handle): each figure is the sum of its ways.
sum_of = lambda *fns: sum(incl.get(fn, 0) for fn in fns)
print("%s: %d queries; per query: worker %.0f instructions (server_worker_main), "
      "UDP drain %.0f, query path %.0f"
      % (mix, queries, per(incl.get("server_worker_main", 0)),
         # less the hosting worker's hand-over (upstream_host_ask): the resolver's
         per(sum_of("server_udp_drain", "server_udp_drain_polled") -
             sum_of("upstream_host_ask")),
         per(sum_of("query_prepare", "query_handle_prepared", "query_handle"))))
if mix == "miss":
    total = 0
    for line in open(path + ".self"):
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
    # the resolver's turns: its own thread's (resolver_main), or on the
    # worker that hosts it (upstream_host_turn, and upstream_host_ask taking
    # that worker's own misses, both inside server_worker_main)
    print("  resolver %.0f instructions (resolver_main + upstream_host_turn + "
          "upstream_host_ask), the whole process %.0f"
          % (per(sum_of("resolver_main", "upstream_host_turn", "upstream_host_ask")),
             per(total)))
# A dump taken while threads run charges the functions on their stacks
# (thread entry points, main) with their callees' costs: not their own.
roots = {"clone", "start_thread", "trampoline", "server_worker_main", "main", "(below main)"}
own = [(n, fn) for n, fn in rows("self")
       if fn not in roots and not fn.startswith(("__libc_start_main", "0x"))]
print("  most instructions of their own, per query:")
for n, fn in own[:top]:
    print("  %8.1f  %s" % (per(n), fn))
EOF
}

# The functions' own instructions per query in a dump, by name: "name count" lines,
# the first "TOTAL count". A dump taken while a thread runs charges each
# function on its stack (main, the loop, thread entry points) with the whole
# program: those rows are left out.
own_by_name() { # dump queries
	callgrind_annotate --auto=no --inclusive=no --threshold=100 "$1" 2>/dev/null |
		python3 -c '
import re, sys
queries = int(sys.argv[1])
row = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(\S.*?)(?:\s+\[[^\]]*\])?$")
total = 0
for line in sys.stdin:
    m = row.match(line)
    if not m:
        continue
    n = int(m.group(1).replace(",", ""))
    if "PROGRAM TOTALS" in m.group(2):
        total = n
        print("TOTAL", total / queries)
    elif ":" in m.group(2) and n < 0.99 * total:
        print(m.group(2).rsplit(":", 1)[1], n / queries)
' "$2"
}

# Before the miss mix is counted: BENCH_CG_MISS_FILL other new names, so
# that the caches are as a flood leaves them, full, each insert evicting.
fill_caches() { # port server
	[ "$MISS_FILL" -gt 0 ] || return 0
	QUERIES=$D/data/fill.txt gen "$D/fill-$2.txt" -p "$1" -n "$MISS_FILL" -Q "$MISS_FILL_RATE" \
		-q 64 -c 8 -t 10 -l 600
	echo "  $2: $(gen_value "$D/fill-$2.txt" received) of $MISS_FILL names asked before counting"
}

# The miss mix again through Unbound (BENCH_CG_PEER), then the two side by side.
peer_miss() { # mix_dir localdns_dump
	local d=$1 ldump=$2 uconf upid udump uport
	nsd_start bench.example miss/data/zone.txt
	uport=$(free_port)
	uconf=$d/unbound.conf
	unbound_miss_conf "$uport" >"$uconf"
	bench_spawn unbound-miss valgrind --tool=callgrind --callgrind-out-file="$d/unbound.out" \
		"$BENCH_CG_PEER" -d -c "$uconf"
	upid=$SPID
	wait_answer "$uport" "$upid" unbound-miss 60 || exit 1
	fill_caches "$uport" unbound
	callgrind_control --zero "$upid" >/dev/null
	gen "$d/peer.txt" -p "$uport" -n "$COUNT" -Q "$MISS_RATE" -q 64 -c 8 -t 10 -l 600
	callgrind_control --dump=peer "$upid" >/dev/null
	bench_stop "$upid"
	bench_stop "$NPID"
	NPID=""
	udump=$(ls "$d/unbound.out".* 2>/dev/null | head -1 || true)
	[ -n "$udump" ] || { echo "callgrind: no dump for unbound" >&2; exit 1; }
	[ -z "${BENCH_CG_KEEP:-}" ] || cp "$udump" "$BENCH_CG_KEEP/callgrind.unbound-miss"
	own_by_name "$ldump" "$RECEIVED" >"$d/own.localdns"
	own_by_name "$udump" "$(gen_value "$d/peer.txt" received)" >"$d/own.unbound"
	python3 - "$d/own.localdns" "$d/own.unbound" "$TOP" "$(gen_value "$d/peer.txt" received)" <<'EOF'
import sys
def load(path):
    d = {}
    for line in open(path):
        name, n = line.rsplit(" ", 1)
        d[name] = d.get(name, 0) + float(n)
    return d
l, u, top, answered = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print("  unbound (BENCH_CG_PEER), the same %s misses: %.0f instructions a miss against "
      "localdns's %.0f" % (answered, u.pop("TOTAL"), l.pop("TOTAL")))
print("  own instructions per miss that differ most (localdns, unbound, difference):")
names = sorted(set(l) | set(u), key=lambda n: -abs(l.get(n, 0) - u.get(n, 0)))
for n in names[:2 * top]:
    print("  %8.0f %8.0f %+8.0f  %s" % (l.get(n, 0), u.get(n, 0), l.get(n, 0) - u.get(n, 0), n))
EOF
}

for MIX in "${MIXES[@]}"; do
	# the daemon's files apart from dnsgen's output: its config watcher
	# would hash them again after every run
	D=$TMP/$MIX
	mkdir -p "$D/data"
	if [ "$MIX" = miss ]; then
		python3 "$HERE/mixes.py" cache "$D/data" $((MISS_NAMES + MISS_FILL))
		# the first MISS_FILL names fill the caches, the rest are counted
		head -n "$MISS_FILL" "$D/data/queries.txt" >"$D/data/fill.txt"
		tail -n +$((MISS_FILL + 1)) "$D/data/queries.txt" >"$D/data/counted.txt"
		mv "$D/data/counted.txt" "$D/data/queries.txt"
	else
		python3 "$HERE/mixes.py" "$MIX" "$D/data"
	fi
	QUERIES=$D/data/queries.txt
	COUNT=$(grep -c . "$QUERIES")
	EXPECTATIONS=0
	UPSTREAM=""
	case $MIX in
	static | srv)
		UPSTREAM="static: {files: [$D/data/records.yaml]}"
		;;
	miss)
		PROBE="ns.bench.example A" # in the zone, not in the query file
		nsd_start bench.example "$MIX/data/zone.txt"
		UPSTREAM="upstream: {servers: [\"127.0.0.1:$NPORT\"], timeout: 2s}"
		;;
	cache)
		PROBE=$(head -1 "$QUERIES")
		nsd_start bench.example "$MIX/data/zone.txt"
		UPSTREAM="upstream: {servers: [\"127.0.0.1:$NPORT\"], timeout: 2s}"
		;;
	search)
		PROBE=$(awk '$3 == "NOERROR" {print $1, $2; exit}' "$QUERIES")
		nsd_start bench.example "$MIX/data/bench.zone" corp.internal "$MIX/data/corp.zone"
		UPSTREAM="upstream: {servers: [\"127.0.0.1:$NPORT\"], timeout: 2s}"
		;;
	*)
		echo "callgrind: unknown mix $MIX (static, cache, search, srv, miss)" >&2
		exit 2
		;;
	esac
	[ "$MIX" = cache ] || [ "$MIX" = miss ] || EXPECTATIONS=1
	[ "$MIX" = cache ] || [ "$MIX" = search ] || [ "$MIX" = miss ] || PROBE=$(head -1 "$QUERIES" | awk '{print $1, $2}')
	PORT=$(free_port)
	CACHE_SIZE=64MiB
	[ "$MIX" != miss ] || CACHE_SIZE=$MISS_CACHE
	{
		localdns_config_head "$PORT"
		cat <<EOF
cluster: {domain: cluster.local, ttl: 5s}
cache: {size: $CACHE_SIZE, max_ttl: 1d, prefetch: true}
security: {seccomp: false}
$UPSTREAM
EOF
	} >"$D/data/localdns.yaml"
	OUT=$D/callgrind.out
	bench_spawn "localdns-$MIX" valgrind --tool=callgrind --callgrind-out-file="$OUT" \
		"$BIN" --config "$D/data/localdns.yaml"
	LPID=$SPID
	wait_answer "$PORT" "$LPID" "localdns-$MIX" 30 || exit 1
	# every name cached before counting: a pass that lost some (valgrind
	# is slow, the machine shared) is followed by another, at most three
	for _ in 1 2 3; do
		[ -n "${NPID:-}" ] && [ "$MIX" != miss ] || break
		warm_up "$PORT" "$MIX" "$COUNT"
		[ "$WARM_OK" = 0 ] || break
	done
	[ "$MIX" != miss ] || fill_caches "$PORT" localdns
	callgrind_control --zero "$LPID" >/dev/null
	N=$((COUNT * PASSES))
	if [ "$MIX" = miss ]; then
		N=$COUNT # a second pass would be hits
		gen "$D/run.txt" -p "$PORT" -n "$N" -Q "$MISS_RATE" -q 64 -c 8 -t 10 -l 600
	else
		gen "$D/run.txt" -p "$PORT" -n "$N" -q 64 -c 8 -t 10 -l 600
	fi
	callgrind_control --dump="$MIX" "$LPID" >/dev/null
	bench_stop "$LPID"
	[ -z "${NPID:-}" ] || { bench_stop "$NPID"; NPID=""; }
	RECEIVED=$(gen_value "$D/run.txt" received)
	LOST=$(gen_value "$D/run.txt" lost)
	FAILED=$(gen_value "$D/run.txt" expect_failed)
	if [ "$RECEIVED" != "$N" ] || [ "$LOST" != 0 ] || [ "$FAILED" != 0 ]; then
		echo "callgrind: warning: $MIX: $N sent, $RECEIVED answered, $LOST lost, $FAILED not as expected" >&2
	fi
	# the dump requested above, not the one at exit
	DUMP=$(ls "$OUT".* 2>/dev/null | grep -v '\.\(incl\|self\)$' | head -1 || true)
	[ -n "$DUMP" ] || { echo "callgrind: no dump for $MIX" >&2; exit 1; }
	report_dump "$DUMP" "$RECEIVED" "$MIX"
	if [ -n "${BENCH_CG_KEEP:-}" ]; then
		mkdir -p "$BENCH_CG_KEEP"
		cp "$DUMP" "$BENCH_CG_KEEP/callgrind.$MIX"
	fi
	[ "$MIX" != miss ] || [ -z "${BENCH_CG_PEER:-}" ] || peer_miss "$D" "$DUMP"
done
