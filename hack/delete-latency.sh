#!/usr/bin/env bash
# Measures, in one run against one real local control plane, the latency a
# client sees for a DELETE through kube-apiserver: of an object Rampart's
# webhook never sees, of one it judges and admits, and of one it denies
# (interleaved), then prints p50 and p99 and their ratios to the first.
# Usage: hack/delete-latency.sh [ITERATIONS]   (default 500)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-500}
make -s build assets >/dev/null
out=$(RAMPART_ASSETS=$PWD/bin/k8s RAMPART_BIN=$PWD/bin/rampart \
  go test -run '^$' -bench 'DeleteThroughAPIServer' -benchtime "${n}x" -count 1 ./internal/admission/ 2>&1)
echo "$out" | grep -E '^(Benchmark|cpu)'
echo "$out" | awk '
  /^BenchmarkDeleteThroughAPIServer/ {
    for (i = 2; i <= NF; i++) {
      c = $i
      if (sub(/-p50-us$/, "", c)) v[c ",p50"] = $(i-1)
      c = $i
      if (sub(/-p99-us$/, "", c)) v[c ",p99"] = $(i-1)
    }
  }
  END {
    if (!(("not-called,p50") in v)) { print "no results"; exit 1 }
    printf "\n%-12s %10s %10s %10s %10s\n", "DELETE", "p50 (us)", "p99 (us)", "p50 ratio", "p99 ratio"
    n = split("not-called admits denies", cs, " ")
    for (j = 1; j <= n; j++) { c = cs[j]
      printf "%-12s %10d %10d %10.2f %10.2f\n", c, v[c ",p50"], v[c ",p99"], v[c ",p50"] / v["not-called,p50"], v[c ",p99"] / v["not-called,p99"] }
  }'
