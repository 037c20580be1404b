#!/usr/bin/env bash
# Prints the gateway's own CPU time per GET, free of the client's and the
# stand-in API server's: BenchmarkProxyOverhead's gateway runs under the
# profiler label side=gateway (everything it starts inherits the label), so
# the samples carrying it are the gateway's alone — both TLS legs, its
# HTTP/2 server, the proxy and its upstream connections, Rampart's guards.
# (gateway/parallel minus direct/parallel, the benchmark's own comparison,
# also counts the stand-in API server serving the gateway's leg.)
#
#   hack/gateway-cpu.sh [ROUNDS] [TEST-BINARY...]
#
# With no binaries it builds the gateway package's test binary from the
# work tree. Given several (e.g. one built at an older commit with the same
# label), it takes turns with them ROUNDS times (default 3), so that the
# machine's noise falls on all alike, and prints one line per run.
# GATEWAY_CPU_TARGET=tls-pipe measures instead the benchmark's TLS byte
# pipe (decrypt, encrypt again, no HTTP read), under the same label: the
# floor of any proxy that ends TLS on these machines;
# GATEWAY_CPU_TARGET=reverseproxy a bare httputil.ReverseProxy behind
# net/http's HTTP/2 server, upstream over HTTP/1.1: the floor of a proxy
# built on net/http, as the gateway is; GATEWAY_CPU_TARGET=reverseproxy-sync
# the same with a stand-in upstream transport that reads and writes in the
# request's goroutine (no client read/write loops): what those cost.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
bins=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ${#bins[@]} -eq 0 ]; then
  go test -c -o "$work/gateway.test" ./internal/servers/gateway/
  bins=("$work/gateway.test")
fi
ops=${GATEWAY_CPU_OPS:-40000}
target=${GATEWAY_CPU_TARGET:-gateway}
# us SECONDS UNIT: pprof's "2.31 s" or "840 ms" as µs per GET.
us() { awk -v v="$1" -v u="$2" -v n="$ops" 'BEGIN { if (u == "ms") v /= 1000; printf "%.1f", v * 1e6 / n }'; }
printf '%-28s %5s %14s %14s %12s\n' binary round "$target µs/GET" 'process µs/GET' 'wall µs/op'
for round in $(seq "$rounds"); do
  for bin in "${bins[@]}"; do
    prof="$work/cpu.prof"
    out=$(cd "$work" && "$bin" -test.run '^$' -test.bench 'ProxyOverhead/^'"$target"'$/parallel' -test.benchtime "${ops}x" -test.cpuprofile "$prof")
    nsop=$(awk -v b="BenchmarkProxyOverhead/$target/parallel" 'index($1, b) == 1 {print $3}' <<<"$out")
    # "Showing nodes accounting for 2.31s, 41.2% of 5.60s total": with
    # no node dropped, the first figure is everything the filter kept.
    total=$(go tool pprof -top -nodefraction=0 -nodecount=1000000 "$bin" "$prof" 2>/dev/null | sed -n 's/^Showing nodes accounting for \([0-9.]*\)\(m*s\),.*/\1 \2/p')
    gw=$(go tool pprof -top -nodefraction=0 -nodecount=1000000 -tagfocus side=gateway "$bin" "$prof" 2>/dev/null | sed -n 's/^Showing nodes accounting for \([0-9.]*\)\(m*s\),.*/\1 \2/p')
    printf '%-28s %5s %14s %14s %12.1f\n' "$(basename "$bin")" "$round" "$(us $gw)" "$(us $total)" "$(awk -v n="$nsop" 'BEGIN {print n / 1000}')"
  done
done
