#!/usr/bin/env bash
# Exactness of the ledger-backed protections under faults (issue 33 item 4),
# counted by oracles Rampart does not control: the API servers' audit logs
# and the pods' own state. ROUNDS rounds of TestLedgerExactUnderFaults on
# one local cluster (three manager replicas, two API servers): in each, a
# PodUnavailableBudget, a sharded store under a budget grouped by shard (8
# shards of 3, minAvailable 2), a DeletionFlowControl and a pool of 9
# simulated nodes under a NodeDisruptionBudget meet a storm of deletes,
# evictions and cordons from 30 workers over 12 clients and one random fault (a replica SIGKILLed,
# stopped with SIGTERM, paused and resumed, or SIGKILLed and started again
# mid-storm; an API server SIGKILLed and started again mid-storm).
#
#   hack/exactness-loop.sh [ROUNDS]              (default 30)
#   RAMPART_EXACTNESS_SEED=S hack/exactness-loop.sh 1   replays the round of seed S
#
# Prints each round's seed, fault and counts (audit = distinct pods a storm
# client deleted or evicted with 200/201; pods = those gone or terminating
# at the end; status = what Rampart's own status says, for comparison), the
# over-admitted pods' audit records if any, and a summary. Exits non-zero
# when a round admitted more than a limit.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-30}
export RAMPART_ASSETS=${RAMPART_ASSETS:-$PWD/bin/k8s} RAMPART_BIN=${RAMPART_BIN:-$PWD/bin/rampart}
export RAMPART_EXACTNESS_ROUNDS=$rounds
make build >/dev/null || exit 1
log=$(mktemp -d)/exactness.log
start=$(date +%s)
go test -count=1 -v -timeout $((15 + rounds * 2))m -run '^TestLedgerExactUnderFaults$' ./internal/protection/admission/ 2>&1 |
  grep --line-buffered -v '^I[0-9]' >"$log"
status=${PIPESTATUS[0]}
took=$(($(date +%s) - start))
sed -n 's/^ *exactness_test.go:[0-9]*: //p' "$log"
grep -E -- '^--- FAIL|^FAIL|panic:' "$log"
over=$(grep -c 'over its limit' "$log")
done=$(grep -c 'EXACTNESS round ' "$log")
skipped=$(grep -c 'not judged' "$log")
echo "== $done of $rounds rounds in ${took}s; $over over a limit; $skipped not judged (a node went NotReady); faults:" \
  "$(grep -o 'EXACTNESS round [0-9]* seed [0-9]* fault [a-z-]*' "$log" | awk '{print $NF}' | sort | uniq -c | tr -s ' \n' ' ')"
echo "   log: $log"
exit "$status"
