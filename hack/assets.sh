#!/usr/bin/env bash
# Builds the binaries the local clusters and the tests run, from pinned Go
# modules (hack/assets/*), in groups; `hack/assets.sh GROUP...` builds only
# those groups, no argument every one (`make assets`, `make test`):
#
#   cluster  what `rampart up` runs (`make up` builds only this), into
#            bin/k8s: kube-apiserver, kube-controller-manager,
#            kube-scheduler, kubectl (hack/assets/kubernetes), etcd and
#            etcdutl (hack/assets/etcd), kwok and its default stages
#            (hack/assets/kwok)
#   nodes    what real nodes add (`rampart up --real-nodes`, the real-node
#            tests), into bin/k8s: the kubelet (hack/assets/kubelet, the
#            same k8s.io/kubernetes as hack/assets/kubernetes) and runc
#            (hack/assets/runc, with seccomp: needs libseccomp-dev and
#            pkg-config, which `make test` installs)
#   charts   what the chart tests add, into bin/k8s: helm
#            (hack/assets/helm) and the Prometheus operator's
#            ServiceMonitor and PrometheusRule CRDs (hack/assets/monitoring)
#            in bin/k8s/crds
#   s3       SeaweedFS's weed (hack/assets/s3), the storage tests' S3
#            server, into bin/s3 (the storage tests build it when it is
#            missing)
#
# Each group is rebuilt only when a binary is missing or its module's
# go.mod/go.sum changed since the last build, so a warm run takes a second.
# No prebuilt binary is downloaded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/k8s"
mkdir -p "$out/.stamps"
# One build at a time: test packages that find a group missing build it
# side by side; the second finds it fresh.
exec 9>"$out/.stamps/lock"
flock 9

# The S3 server is no part of the local cluster: it has its own folder.
s3out="$root/bin/s3"
mkdir -p "$s3out/.stamps"
s3fresh() { [ "$(cat "$s3out/.stamps/s3" 2>/dev/null)" = "$(stamp s3)" ] && [ -x "$s3out/weed" ]; }
s3build() {
  s3fresh && return
  local start=$SECONDS
  echo "assets: building the S3 server (SeaweedFS; a cold build takes about 5 minutes on 2 cores)..."
  (cd "$root/hack/assets/s3" && go build -ldflags '-s -w' -o "$s3out/weed" github.com/seaweedfs/seaweedfs/weed)
  stamp s3 > "$s3out/.stamps/s3"
  echo "assets: S3 server built in $((SECONDS - start))s"
}

# The binaries are built without -trimpath, with the flags `go build` and
# `go test` use on the project: the Kubernetes libraries they share with it
# (client-go, apimachinery, apiserver, ... at the same versions) then
# compile once into the build cache for both. With -trimpath a cold cache
# compiled client-go's 554 packages a second time.

# stamp NAME prints the digest of the module that builds group NAME.
stamp() { cat "$root/hack/assets/$1/go.mod" "$root/hack/assets/$1/go.sum" | sha256sum | cut -d' ' -f1; }

# fresh NAME FILE... succeeds when every FILE exists and was built from the
# current module.
fresh() {
  local name=$1; shift
  [ "$(cat "$out/.stamps/$name" 2>/dev/null)" = "$(stamp "$name")" ] || return 1
  for f in "$@"; do [ -x "$out/$f" ] || [ -f "$out/$f" ] || return 1; done
}

build() {
  local name=$1; shift
  local start=$SECONDS
  echo "assets: building $name (cold builds take minutes on 2 cores)..."
  (cd "$root/hack/assets/$name" && "$@")
  stamp "$name" > "$out/.stamps/$name"
  echo "assets: $name built in $((SECONDS - start))s"
}

# unshared A B lists the modules hack/assets/A selects at another version
# than hack/assets/B does, as "PATH A's (B's)".
unshared() {
  local f='{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}'
  LC_ALL=C join <(cd "$root/hack/assets/$1" && go list -m -f "$f" all | LC_ALL=C sort) \
    <(cd "$root/hack/assets/$2" && go list -m -f "$f" all | LC_ALL=C sort) |
    awk '$2 != $3 {printf "%s%s %s (%s)", sep, $1, $2, $3; sep = ", "}'
}

# modversion DIR MODULE prints the version DIR's go.mod pins MODULE at.
modversion() { sed -n "s#^[^/]*$2 \(v[^ ]*\).*#\1#p" "$root/hack/assets/$1/go.mod" | head -1; }

k8s_version=$(modversion kubernetes k8s.io/kubernetes)
minor=$(echo "$k8s_version" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

cluster() {
  fresh kubernetes kube-apiserver kube-controller-manager kube-scheduler kubectl ||
    build kubernetes go build -ldflags "$ldflags" -o "$out/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

  fresh etcd etcd etcdutl ||
    build etcd sh -c "go build -ldflags '-s -w' -o '$out/etcd' go.etcd.io/etcd/server/v3 &&
      go build -ldflags '-s -w' -o '$out/etcdutl' go.etcd.io/etcd/etcdutl/v3"

  if ! fresh kwok kwok kwok-stages.yaml; then
    local drift
    drift=$(unshared kwok kubernetes)
    [ -z "$drift" ] || echo "assets: hack/assets/kwok selects other versions than hack/assets/kubernetes of modules both use," \
      "so a cold build compiles them twice; add them to its go.mod's replace block at kubernetes' versions: $drift" >&2
    build kwok sh -c "go build -ldflags '-s -w' -o '$out/kwok' sigs.k8s.io/kwok/cmd/kwok && go run ./stages > '$out/kwok-stages.yaml'"
  fi

  summary+=("bin/k8s has kubernetes $k8s_version, $("$out/etcd" --version | head -1), kwok $(modversion kwok sigs.k8s.io/kwok)")
}

nodes() {
  # The kubelet is a module of its own so that adding it left the control
  # plane's stamp alone; it must still be the same Kubernetes.
  local kubelet_version runc_version
  kubelet_version=$(modversion kubelet k8s.io/kubernetes)
  if [ "$kubelet_version" != "$k8s_version" ]; then
    echo "assets: hack/assets/kubelet pins k8s.io/kubernetes $kubelet_version but hack/assets/kubernetes pins $k8s_version;" \
      "set both go.mod files (require and replace) to one version and run go mod tidy in each" >&2
    exit 1
  fi
  fresh kubelet kubelet ||
    build kubelet go build -ldflags "$ldflags" -o "$out/kubelet" k8s.io/kubernetes/cmd/kubelet

  # runc links libseccomp (Debian's runc 1.1.5 cannot start a CRI sandbox
  # here); without the headers real nodes cannot run, the rest still can.
  runc_version=$(modversion runc github.com/opencontainers/runc)
  if fresh runc runc; then
    :
  elif pkg-config --exists libseccomp 2>/dev/null; then
    build runc go build -tags seccomp -ldflags "-s -w -X main.version=${runc_version#v}" -o "$out/runc" github.com/opencontainers/runc
  else
    echo "assets: runc NOT built: it needs libseccomp-dev and pkg-config (apt-get install libseccomp-dev pkg-config, or make test, which installs them);" \
      "rampart up --real-nodes and the real-node tests need it" >&2
  fi
  summary+=("bin/k8s has the kubelet $kubelet_version and runc $runc_version")
}

# copy_monitoring_crds copies the two CRDs out of the pinned module.
copy_monitoring_crds() {
  local dir
  dir=$(go mod download -json github.com/prometheus-operator/prometheus-operator | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$out/crds"
  for kind in servicemonitors prometheusrules; do
    install -m 644 "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$out/crds/"
  done
}

charts() {
  local helm_version
  helm_version=$(modversion helm helm.sh/helm/v4)
  fresh helm helm ||
    build helm go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" -o "$out/helm" helm.sh/helm/v4/cmd/helm
  fresh monitoring crds/monitoring.coreos.com_servicemonitors.yaml crds/monitoring.coreos.com_prometheusrules.yaml ||
    build monitoring copy_monitoring_crds
  summary+=("bin/k8s has helm $helm_version and the ServiceMonitor and PrometheusRule CRDs")
}

s3() {
  s3build
  summary+=("bin/s3 has SeaweedFS $(modversion s3 github.com/seaweedfs/seaweedfs)")
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(cluster nodes charts s3)
for g in "${groups[@]}"; do
  case $g in
    cluster | nodes | charts | s3) ;;
    *) echo "assets: no group $g: want cluster, nodes, charts or s3 (none: all)" >&2; exit 2 ;;
  esac
done
summary=()
for g in "${groups[@]}"; do "$g"; done
for line in "${summary[@]}"; do echo "assets: $line"; done
