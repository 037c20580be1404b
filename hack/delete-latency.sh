#!/usr/bin/env bash
# Measures, in one run, the latency a client sees for a DELETE of a
# ConfigMap through kube-apiserver on three real local clusters alike but
# for the recycle bin (in a directory, none, in S3 on this machine): of one
# Rampart's webhook never sees, of a protected one it judges and admits
# (with its copy kept, or with no bin only judged), and of one it denies
# (interleaved), then prints p50 and p99, their ratios to the unlabelled
# delete of the same cluster, and the capture's own cost: a kept delete
# against a judged one with no bin.
# Usage: hack/delete-latency.sh [ITERATIONS]   (default 500)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-500}
make -s build assets >/dev/null
out=$(RAMPART_ASSETS=$PWD/bin/k8s RAMPART_BIN=$PWD/bin/rampart RAMPART_S3_SERVER=$PWD/bin/s3/weed \
  go test -run '^$' -bench 'DeleteThroughAPIServer' -benchtime "${n}x" -count 1 -v -timeout 30m ./internal/protection/admission/ 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E '^(Benchmark|cpu)'
echo "$out" | grep -E "handler mean" | sed "s/^ *latency_test.go:[0-9]*: //"
echo "$out" | awk '
  /^BenchmarkDeleteThroughAPIServer/ {
    for (i = 2; i <= NF; i++) {
      c = $i
      if (sub(/-p50-us$/, "", c)) v[c ",p50"] = $(i-1)
      c = $i
      if (sub(/-p99-us$/, "", c)) v[c ",p99"] = $(i-1)
    }
  }
  function row(c, what, bin, base) {
    printf "%-28s %-10s %9d %9d %10.2f %10.2f\n", what, bin, v[c ",p50"], v[c ",p99"], v[c ",p50"] / v[base ",p50"], v[c ",p99"] / v[base ",p99"]
  }
  function cost(c, bin) {
    printf "  bin in %-10s p50 %.2fx  p99 %.2fx\n", bin, v[c ",p50"] / v["nobin-judged,p50"], v[c ",p99"] / v["nobin-judged,p99"]
  }
  END {
    if (!(("dir-unlabelled,p50") in v)) { print "no results"; exit 1 }
    printf "\n%-28s %-10s %9s %9s %10s %10s\n", "DELETE of a ConfigMap", "BIN", "p50 (us)", "p99 (us)", "p50 ratio", "p99 ratio"
    row("dir-unlabelled", "unlabelled (no webhook)", "directory", "dir-unlabelled")
    row("dir-kept", "Cascading, copy kept", "directory", "dir-unlabelled")
    row("dir-denied", "Always, denied", "directory", "dir-unlabelled")
    row("nobin-unlabelled", "unlabelled (no webhook)", "none", "nobin-unlabelled")
    row("nobin-judged", "Cascading, judged, no copy", "none", "nobin-unlabelled")
    row("s3-unlabelled", "unlabelled (no webhook)", "S3", "s3-unlabelled")
    row("s3-kept", "Cascading, copy kept", "S3", "s3-unlabelled")
    print "(ratios: to the unlabelled delete on the same cluster)"
    print "\nthe capture: a Cascading delete with its copy kept, against one judged with no bin"
    cost("dir-kept", "directory")
    cost("s3-kept", "S3")
  }'
