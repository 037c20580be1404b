#!/usr/bin/env bash
# Measures, in one run on a real local cluster, what the node layer's
# rules cost the writes a cluster makes all day, each against the same
# write where no rule applies (interleaved, dry runs): the kubelet's node
# heartbeat and a user's label change on a node a NodeDisruptionBudget
# selects (its webhook's match conditions, evaluated by the API server),
# a cordon of such a node (judged by the webhook), and the kubelet's
# status write of a pod labelled rampart.io/explicit-deletion=true (the
# compiled policy saved-pods.rampart.io's match conditions). Prints p50,
# p99 and the p50 ratio to the no-rule write.
# Usage: hack/node-latency.sh [ITERATIONS]   (default 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
make -s build assets >/dev/null
out=$(RAMPART_ASSETS=$PWD/bin/k8s RAMPART_BIN=$PWD/bin/rampart \
  go test -run '^$' -bench 'NodeWritesUnderTheRules' -benchtime "${n}x" -count 1 -timeout 30m ./internal/protection/nodebudget/admit/ 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E '^(Benchmark|cpu)' | cut -c1-60
echo "$out" | awk '
  /^BenchmarkNodeWritesUnderTheRules/ {
    for (i = 2; i <= NF; i++) {
      c = $i
      if (sub(/-p50-ms$/, "", c)) v[c ",p50"] = $(i-1)
      c = $i
      if (sub(/-p99-ms$/, "", c)) v[c ",p99"] = $(i-1)
    }
  }
  function row(c, what) {
    printf "%-58s %8.2f %8.2f %8.2f %8.2f %7.2f\n", what, v[c ",p50"], v[c ",p99"], v[c "-norule,p50"], v[c "-norule,p99"], v[c ",p50"] / v[c "-norule,p50"]
  }
  END {
    if (!(("node-status,p50") in v)) { print "no results"; exit 1 }
    printf "\n%-58s %8s %8s %8s %8s %7s\n", "WRITE (dry run)", "p50 ms", "p99 ms", "no rule", "p99", "p50 x"
    row("node-status", "kubelet node heartbeat, node in a budget'"'"'s pool")
    row("node-label", "user labels a node in a budget'"'"'s pool")
    row("pod-status", "kubelet pod status, pod labelled explicit-deletion")
    row("node-cordon", "user cordons a node in a budget'"'"'s pool (judged)")
    print "(no rule: the same write of a node no budget selects, or of an unlabelled pod)"
  }'
