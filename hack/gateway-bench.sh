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
# GATEWAY_BENCH_PROFILE=FILE also profiles the gateway process (the one
# concurrency given) and prints where its CPU goes: Rampart's own code
# (identity, guards, policies, metrics, the traffic log) against net/http,
# TLS and the kernel. GATEWAY_BENCH_OPS=GET keeps to single-object GETs.
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
      go test -count 1 -run '^$' -bench 'GatewayVsDirect' -benchtime 1x ./internal/servers/gateway/ 2>&1 |
      grep -E "^(concurrency|op|GET|LIST|traffic log|CPU per request|gateway process profile)" || { echo "benchmark failed at concurrency $level"; exit 1; }
  done
done
if [ -n "${GATEWAY_BENCH_PROFILE:-}" ]; then
  # seconds PPROF-ARGS...: the CPU seconds the profile's samples add up
  # to after pprof's filters ("Showing nodes accounting for 2.31s, ...").
  seconds() {
    go tool pprof -top -nodefraction=0 -nodecount=1000000 "$@" bin/rampart "$GATEWAY_BENCH_PROFILE" 2>/dev/null |
      sed -n 's/^Showing nodes accounting for \([0-9.]*\)\(m*s\),.*/\1 \2/p' | awk '{ print ($2 == "ms") ? $1 / 1000 : $1 }'
  }
  all=$(seconds)
  # Rampart's own: samples in its packages, less those inside the proxy
  # and HTTP client it calls (net/http's work, not Rampart's).
  own=$(seconds -focus 'rampart-io/rampart' -ignore 'httputil\.|net/http\.\(\*Transport\)|net/http\.\(\*persistConn\)|crypto/tls')
  tlog=$(seconds -focus 'gateway/trafficlog')
  awk -v a="$all" -v o="$own" -v l="$tlog" 'BEGIN {
    printf "gateway process CPU in the profile: %.2f s; Rampart'"'"'s own code %.2f s (%.1f%%), of which the traffic log %.2f s (%.1f%%); the rest is net/http, TLS, the Go runtime and the kernel\n", a, o, 100 * o / a, l, 100 * l / a }'
fi
