#!/usr/bin/env bash
# Measures, in one run against one real local control plane (two API
# servers on one etcd, the gateway in front), throughput and p50/p99
# latency of single-object GETs and of LISTs of 500 ConfigMaps at a fixed
# concurrency: direct to the first API server and through an in-process
# gateway in front of that API server alone (the gateway's own cost);
# direct to a random one of both API servers and through the gateway
# process balancing over both (as deployed). Prints one table per
# concurrency, each gateway mode against its direct counterpart.
# Usage: hack/gateway-bench.sh [CONCURRENCY...]   (default: 2 8)
# GATEWAY_BENCH_SECONDS (default 1) and GATEWAY_BENCH_ROUNDS (default 8)
# set the time per mode and round. RAMPART_ASSETS, when set, names
# Kubernetes binaries already built (bin/k8s is built otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${RAMPART_ASSETS:-}" ]; then
  make -s build >/dev/null
else
  make -s build assets >/dev/null
  RAMPART_ASSETS=$PWD/bin/k8s
fi
for c in "${@:-2 8}"; do
  for level in $c; do
    RAMPART_ASSETS=$RAMPART_ASSETS RAMPART_BIN=$PWD/bin/rampart GATEWAY_BENCH_CONCURRENCY=$level \
      go test -count 1 -run '^$' -bench 'GatewayVsDirect' -benchtime 1x ./internal/gateway/ 2>&1 |
      grep -E "^(concurrency|op|GET|LIST|traffic log|CPU per request)" || { echo "benchmark failed at concurrency $level"; exit 1; }
  done
done
