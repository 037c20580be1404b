#!/usr/bin/env bash
# Measures BenchmarkDeleteLatencyByEngine (no rule, compiled policy,
# webhook, bare-policy floor) against the pinned kube-apiserver and
# against another one, taking turns, RUNS times each. kube-apiserver 1.36
# converts the object, old object, request and namespace for every CEL
# pass of a ValidatingAdmissionPolicy; 1.37 (the pin) does it lazily,
# which is what separates the compiled policy's message from the floor.
# The other control plane is built once into bin/k8s-VERSION by
# hack/compat.sh (make compat's), beside the pinned assets for the rest.
#   hack/compiled-latency-by-apiserver.sh [VERSION] [RUNS]   (default v1.36.3 2)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-v1.36.3}
RUNS=${2:-2}
make -s build assets >/dev/null
COMPAT_BUILD_ONLY=1 bash hack/compat.sh "$VERSION"
NEW=$PWD/bin/k8s-$VERSION
for i in $(seq "$RUNS"); do
  for assets in "$PWD/bin/k8s" "$NEW"; do
    printf '%-28s' "$(basename "$assets"):"
    RAMPART_ASSETS=$assets RAMPART_BIN=$PWD/bin/rampart go test -count=1 -run '^$' -bench DeleteLatencyByEngine -benchtime 1500x ./internal/protection/admission/ 2>&1 |
      grep -E '^Benchmark' | tr '\t' '\n' | grep -E '/norule-p50|norule-p50-ms' | sed -E 's/^ +//' | tr '\n' ' '
    echo
  done
done
