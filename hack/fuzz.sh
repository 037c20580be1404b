#!/usr/bin/env bash
# Runs every Go fuzz target in the repository for FUZZTIME each (default
# 5m; `make fuzz-smoke` runs them for 5s). A crash leaves its input in the
# package's testdata/fuzz/<Target>/, where plain `go test` replays it from
# then on. -short keeps packages whose TestMain starts a local cluster from
# starting one: no fuzz target needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-5m}
GO=${GO:-go}
failed=()
total=0
while IFS=: read -r file _ line; do
	name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$line")
	pkg=./$(dirname "$file")
	total=$((total + 1))
	start=$(date +%s)
	out=$($GO test -short -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 0 -parallel 1 "$pkg" 2>&1) && rc=0 || rc=$?
	# Go's fuzzing engine may end a run whose time is up while a worker
	# is still busy with "context deadline exceeded" and nothing else: no
	# input failed. A crash or a hang says so and writes its input.
	if [ $rc -ne 0 ] && ! grep -qE 'Failing input|hung|panic|FAIL: Fuzz[A-Za-z0-9_]*/|fuzz_test.go' <<<"$out" && grep -q 'context deadline exceeded' <<<"$out"; then
		rc=0
	fi
	if [ $rc -eq 0 ]; then
		execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -1 || true)
		printf 'ok   %-28s %-32s %3ss  %s\n' "$name" "$pkg" $(($(date +%s) - start)) "$execs"
	else
		printf 'FAIL %-28s %s\n' "$name" "$pkg"
		grep -v '^fuzz: elapsed' <<<"$out" | sed 's/^/     /'
		failed+=("$name")
	fi
done < <(git grep -n -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' | sort)
echo "$total fuzz targets, ${#failed[@]} failed ${failed[*]:-}"
[ ${#failed[@]} -eq 0 ]
