#!/usr/bin/env bash
# Measures BenchmarkDeleteLatencyByEngine (no rule, compiled policy,
# webhook, bare-policy floor) against the pinned kube-apiserver and
# against a newer one, taking turns, RUNS times each. kube-apiserver 1.36
# converts the object, old object, request and namespace for every CEL
# pass of a ValidatingAdmissionPolicy; 1.37 does it lazily, which is what
# separates the compiled policy's message from the floor.
# The newer kube-apiserver is built once into bin/k8s-VERSION from
# k8s.io/kubernetes at VERSION (the module proxy serves it), beside the
# pinned assets for everything else.
#   hack/compiled-latency-by-apiserver.sh [VERSION] [RUNS]   (default v1.37.2 2)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-v1.37.2}
RUNS=${2:-2}
make -s build assets >/dev/null
NEW=$PWD/bin/k8s-$VERSION
if [ ! -x "$NEW/kube-apiserver" ]; then
  mkdir -p "$NEW/module"
  # The pinned module's go.mod at VERSION: staging modules at v0.MINOR.PATCH.
  staging=v0.${VERSION#v1.}
  pinned=$(sed -n 's/^require k8s.io\/kubernetes \(v[0-9.]*\)$/\1/p' hack/assets/kubernetes/go.mod)
  sed "s/$pinned/$VERSION/g; s/v0.${pinned#v1.}/$staging/g; s#^module .*#module rampart.local/k8s-$VERSION#" \
    hack/assets/kubernetes/go.mod > "$NEW/module/go.mod"
  printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n\nfunc main() {}\n' > "$NEW/module/main.go"
  (cd "$NEW/module" && GOFLAGS=-mod=mod go mod tidy && go build -o "$NEW/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  for f in bin/k8s/*; do
    [ "$(basename "$f")" = kube-apiserver ] || ln -sfn "$PWD/$f" "$NEW/$(basename "$f")"
  done
fi
for i in $(seq "$RUNS"); do
  for assets in "$PWD/bin/k8s" "$NEW"; do
    printf '%-28s' "$(basename "$assets"):"
    RAMPART_ASSETS=$assets RAMPART_BIN=$PWD/bin/rampart go test -count=1 -run '^$' -bench DeleteLatencyByEngine -benchtime 1500x ./internal/protection/admission/ 2>&1 |
      grep -E '^Benchmark' | tr '\t' '\n' | grep -E '/norule-p50|norule-p50-ms' | sed -E 's/^ +//' | tr '\n' ' '
    echo
  done
done
