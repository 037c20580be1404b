#!/usr/bin/env bash
# Budgets in force from creation and across manager failover (issues 20, 24).
#
#   hack/budgets-in-force-loop.sh [ITERATIONS]   (default 50)
#
# 1. One manager: ITERATIONS times each, a PodUnavailableBudget created over
#    10 running pods (minAvailable 8), and a 10-replica Deployment annotated
#    rampart.io/generate-pub (maxUnavailable 2); at once after the request
#    returns, 10 concurrent deletes and evictions. A bypass is a round with
#    more than 2 pods disrupted.
# 2. Three managers: the same, ITERATIONS/5 times each.
# 3. Failover storm: three managers, a 10-replica Deployment under
#    maxUnavailable 2, 30 workers deleting and evicting for 2 s while the
#    leader is SIGKILLed, 5 rounds, replacements held Pending.
# IN_FORCE_LOG=FILE only summarises a previous run's log.
# Prints bypasses and the latency of the creating request (what waiting
# for the budget to be in force adds to it).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
export RAMPART_ASSETS=${RAMPART_ASSETS:-$PWD/bin/k8s} RAMPART_BIN=${RAMPART_BIN:-$PWD/bin/rampart}
log=$(mktemp -d)/in-force.log
run() { go test -count=1 -v -timeout 60m "$@" ./internal/protection/admission/ 2>&1 | grep -v '^I[0-9]' >>"$log" || { tail -30 "$log"; exit 1; }; }
if [ -n "${IN_FORCE_LOG:-}" ]; then
  log=$IN_FORCE_LOG # summarise a previous run only
else
make build >/dev/null
RAMPART_INFORCE_ITERATIONS=$n run -run '^(TestBudgetHoldsFromCreation|TestGeneratedBudgetHoldsFromAnnotation)$'
RAMPART_INFORCE_ITERATIONS=$(( n / 5 > 0 ? n / 5 : 1 )) run -run '^TestBudgetHoldsFromCreationWithSeveralReplicas$'
RAMPART_FAILOVER_ROUNDS=5 run -run '^TestBudgetHoldsAcrossManagerFailover$'
fi
summary() { # $1: test name, $2: "budget created" or "annotation accepted"
  awk -v test="$1" -v what="$2" '
    /^=== RUN/ { cur = $3 }
    cur == test && index($0, what " in ") {
      s = $0; sub(".*" what " in ", "", s); d = s; sub(";.*", "", d)
      ms = (d ~ /ms$/) ? d + 0 : (d ~ /s$/ ? d * 1000 : d / 1000)
      s = $0; sub(".*; ", "", s)
      print ms, s + 0
    }' "$log" | sort -n | awk -v test="$1" -v what="$2" '
    { lat[++k] = $1; if ($2 > 2) bad++ }
    END {
      if (k == 0) { print test ": no rounds"; exit }
      printf "%-48s %-19s rounds %3d  bypasses %d  latency p50 %4.0f ms  p95 %4.0f ms  max %4.0f ms\n", test, what, k, bad + 0,
        lat[int((k + 1) / 2)], lat[int(k * 0.95 + 0.999)], lat[k]
    }'
}
echo "== budgets in force ($n iterations; log $log)"
summary TestBudgetHoldsFromCreation "budget created"
summary TestGeneratedBudgetHoldsFromAnnotation "annotation accepted"
summary TestBudgetHoldsFromCreationWithSeveralReplicas "budget created"
summary TestBudgetHoldsFromCreationWithSeveralReplicas "annotation accepted"
grep -E 'round [0-9]+: .*requests' "$log" | sed 's/^ *budget_inforce_test.go:[0-9]*: /failover /'
grep -E 'rounds, a leader SIGKILLed' "$log" | sed 's/^ *budget_inforce_test.go:[0-9]*: /failover /'
