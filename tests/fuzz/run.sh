#!/usr/bin/env bash
# Usage: run.sh SECONDS BIN...
# Runs each libFuzzer binary for SECONDS over its own corpus in
# build/fuzz/corpus-NAME (kept between runs, so coverage accumulates),
# seeded from tests/fuzz/seeds/NAME/ (see make_seeds.py) and, for the
# targets that take a query, a few DNS queries generated below.
# Crash inputs land in build/fuzz/crash-NAME/. Exits non-zero if any
# binary found a crash (or failed to run) and says so on the last line.
set -u

if [ $# -lt 2 ]; then
	echo "usage: $0 SECONDS BIN..." >&2
	exit 2
fi
seconds=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build/fuzz

# Hand-written queries, so a short run starts from the interesting shapes
# instead of rediscovering the header layout.
write_seeds() {
	local dir=$1
	local hdr='\x12\x34\x01\x00\x00\x01' # ID, RD, one question
	local q='\x03www\x07Example\x03com\x00\x00\x01\x00\x01'
	local opt='\x00\x00\x29\x04\xd0\x00\x00\x80\x00'
	printf "$hdr"'\x00\x00\x00\x00\x00\x00'"$q" >"$dir/seed-plain"
	printf "$hdr"'\x00\x00\x00\x00\x00\x01'"$q$opt"'\x00\x0c\x00\x0a\x00\x08\xa0\xa1\xa2\xa3\xa4\xa5\xa6\xa7' \
		>"$dir/seed-edns-cookie"
	printf "$hdr"'\x00\x00\x00\x00\x00\x01'"$q"'\x00\x00\x29\x04\xd0\x00\x01\x00\x00\x00\x00' \
		>"$dir/seed-badvers"
	printf "$hdr"'\x00\x00\x00\x00\x00\x01'"$q"'\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x0a\x00\x00\x01' \
		>"$dir/seed-additional-pointer"
	printf '\x12\x34\x10\x00\x00\x01\x00\x00\x00\x00\x00\x00'"$q" >"$dir/seed-notimp"
	printf "$hdr"'\x00\x00\x00\x00\x00\x00''\x05_http\x04_tcp\x03web\x03svc\x07cluster\x05local\x00\x00\x21\x00\x01' \
		>"$dir/seed-srv"
}

failed=()
total_execs=0
for bin in "$@"; do
	name=$(basename "$bin")
	name=${name#fuzz_}
	corpus=$out/corpus-$name
	crashes=$out/crash-$name
	log=$out/$name.log
	mkdir -p "$corpus" "$crashes"
	case $name in
	query | handle) write_seeds "$corpus" ;;
	esac
	if [ -d "$root/tests/fuzz/seeds/$name" ]; then
		cp -n "$root/tests/fuzz/seeds/$name/"* "$corpus/"
	fi

	# stdin is /dev/null: a config naming /dev/stdin in static.files must not wait for a tty
	echo "fuzz: $name for ${seconds}s (log: $log)"
	"$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1 </dev/null
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	total_execs=$((total_execs + ${execs:-0}))
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$log"
		echo "fuzz: $name FAILED (exit $rc), inputs in $crashes/"
		failed+=("$name")
	else
		echo "fuzz: $name ok, ${execs:-?} executions"
	fi
done

if [ ${#failed[@]} -ne 0 ]; then
	echo "fuzz: FAILED: ${failed[*]} ($total_execs executions in all)"
	exit 1
fi
echo "fuzz: all $# target(s) passed, $total_execs executions in ${seconds}s each"
