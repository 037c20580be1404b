#!/usr/bin/env bash
# make compat: the admission, compiled-policy and chart tests against the
# control planes of the Kubernetes minors before the pin, the supported
# range (docs/install-and-operations.md). make test stays on the pin.
#
# Each VERSION's kube-apiserver, kube-controller-manager and kube-scheduler
# are built once into bin/k8s-VERSION from k8s.io/kubernetes at VERSION (a
# module of its own under bin/k8s-VERSION/module, its staging modules at
# v0.MINOR.PATCH as the pinned hack/assets/kubernetes does); etcd, kwok,
# kubectl, helm and the CRDs are the pinned ones (bin/k8s), linked beside
# them. A version is rebuilt only when a binary is missing.
#
#   hack/compat.sh [VERSION...]      (default: v1.36.3 v1.35.4)
#   COMPAT_PACKAGES="./charts/" hack/compat.sh v1.35.4
#   COMPAT_BUILD_ONLY=1 hack/compat.sh v1.36.3   (bin/k8s-v1.36.3, no test)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(v1.36.3 v1.35.4)
packages=${COMPAT_PACKAGES:-./internal/protection/admission/ ./internal/protection/compiled/ ./charts/}
GO=${GO:-go}

make -s build assets >/dev/null

# buildversion VERSION builds the control plane of VERSION into bin/k8s-VERSION.
buildversion() {
  local version=$1 dir=$root/bin/k8s-$1 minor staging gomod godebug ldflags start=$SECONDS
  if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-controller-manager" ] && [ -x "$dir/kube-scheduler" ]; then
    return
  fi
  echo "compat: building kube-apiserver, kube-controller-manager and kube-scheduler $version (a cold build takes about 10 minutes on 2 cores)..."
  mkdir -p "$dir/module"
  minor=$(echo "$version" | cut -d. -f2)
  staging=v0.${version#v1.}
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces
  # them with ./staging/...; a module that imports it replaces them with
  # the published v0.MINOR.PATCH, read from that version's own go.mod.
  gomod=$($GO mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  godebug=$(grep -m1 '^godebug ' "$gomod" || true)
  {
    printf 'module rampart.local/k8s-%s\n\ngo 1.26.0\n\n' "$version"
    [ -z "$godebug" ] || printf '%s\n\n' "$godebug"
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$version"
    sed -n "s#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\t\1 => \1 $staging#p" "$gomod"
    printf ')\n'
  } >"$dir/module/go.mod"
  cat >"$dir/module/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
EOF
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  (cd "$dir/module" && GOFLAGS=-mod=mod $GO mod tidy &&
    $GO build -ldflags "$ldflags" -o "$dir/" k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)
  echo "compat: $version built in $((SECONDS - start))s"
}

failed=()
for version in "${versions[@]}"; do
  buildversion "$version"
  dir=$root/bin/k8s-$version
  for f in "$root"/bin/k8s/*; do
    case $(basename "$f") in
      kube-apiserver | kube-controller-manager | kube-scheduler) ;;
      *)
        # kubectl apply -f does not read a linked directory (the CRDs): copy it.
        rm -rf "${dir:?}/$(basename "$f")"
        if [ -d "$f" ]; then cp -r "$f" "$dir/"; else ln -s "$f" "$dir/$(basename "$f")"; fi
        ;;
    esac
  done
  [ -z "${COMPAT_BUILD_ONLY:-}" ] || continue
  echo "compat: $("$dir/kube-apiserver" --version) (pinned: $("$root/bin/k8s/kube-apiserver" --version)): $packages"
  # shellcheck disable=SC2086 # packages is a list
  if RAMPART_ASSETS=$dir RAMPART_BIN=$root/bin/rampart RAMPART_IMAGE=$root/bin/rampart-image.tar \
    $GO test -count=1 -timeout 40m $packages; then
    echo "compat: $version passed"
  else
    echo "compat: $version FAILED"
    failed+=("$version")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "compat: failed on ${failed[*]}"
  exit 1
fi
[ -n "${COMPAT_BUILD_ONLY:-}" ] || echo "compat: passed on ${versions[*]} (and make test on the pin)"
