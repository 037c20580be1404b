#!/usr/bin/env bash
# The body of `make test` once lint, build and assets are done: every Go
# test (unit, and integration against real local control planes), the
# fuzz smoke (every fuzz target for FUZZTIME, default 5s) and the secret
# scan of the tests' logs.
#
# The fuzz smoke runs beside the Go tests at the lowest CPU priority (nice
# 19): the cluster tests leave about 40% of the two cores idle while API
# servers, kubelets and tests wait on each other (a warm make test used 22
# CPU-minutes in 18.5 minutes), and the smoke's
# coverage-instrumented builds (minutes on a cold build cache) and fuzzing
# take that idle time instead of adding theirs after the tests. At nice 19
# a test that wants a core gets it at once, so the tests' timing is that
# of a machine without the smoke.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export FUZZTIME=${FUZZTIME:-5s}
bin=$PWD/bin
logs=$bin/test-logs
rm -rf "$logs"
mkdir -p "$logs"

fuzzlog=$(mktemp)
trap 'rm -f "$fuzzlog"' EXIT
GO=$GO nice -n 19 bash hack/fuzz.sh >"$fuzzlog" 2>&1 &
fuzz=$!

RAMPART_TEST_LOGS=$logs RAMPART_ASSETS=$bin/k8s RAMPART_BIN=$bin/rampart RAMPART_S3_SERVER=$bin/s3/weed \
  RAMPART_IMAGE=$bin/rampart-image.tar $GO test -count=1 -timeout 40m ./...
tests=$?
# make image's builder is a module of its own (its dependencies must not
# move the binary's): its test runs here.
(cd hack/image && $GO vet ./... && $GO test -count=1 ./...) || tests=1

if [ -f "$logs/drills.txt" ]; then
  echo "drills at test scale (TestDrills; full scale: rampart drill):"
  cat "$logs/drills.txt"
fi
if [ -f "$logs/operations.txt" ]; then
  echo "everyday operations at test scale (TestEverydayOperations; full scale: rampart drill):"
  cat "$logs/operations.txt"
fi

wait "$fuzz"
fuzzed=$?
echo "fuzz smoke (beside the tests, at nice 19):"
cat "$fuzzlog"
# A fuzz body with a deadline can fail only because the tests starved it
# of CPU. Such a failure does not come back when the smoke runs alone; a
# real one does: its input is in testdata/fuzz now and is replayed first.
if [ $fuzzed -ne 0 ]; then
  echo "fuzz smoke: a target failed beside the tests; running the smoke again alone (a real failure fails again)"
  GO=$GO bash hack/fuzz.sh
  fuzzed=$?
  if [ $fuzzed -eq 0 ]; then
    git status --porcelain --untracked-files=all -- '*/testdata/fuzz/*' | sed -n 's/^?? /fuzz smoke: passes alone, left by the failure beside the tests (delete it): /p'
  fi
fi

bash hack/secret-scan.sh "$logs"
scanned=$?

[ $tests -eq 0 ] && [ $fuzzed -eq 0 ] && [ $scanned -eq 0 ]
