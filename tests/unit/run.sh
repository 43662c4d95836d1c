#!/usr/bin/env bash
# Runs every cmocka unit-test binary given as arguments and prints one
# closing summary line ("unit: N passed, N failed") across all of them.
set -u
passed=0 failed=0 broken=()
for bin in "$@"; do
	out=$("$bin" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0}))
	if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
		failed=$((failed + 1)) # crashed before cmocka could count
		broken+=("$bin")
	fi
done
[ ${#broken[@]} -eq 0 ] || echo "crashed: ${broken[*]}"
echo "unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
