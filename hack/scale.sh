#!/usr/bin/env bash
# scale.sh: brings a local cluster (rampart up --gateway, kwok nodes) to
# 35,000 pods on 2,500 nodes in steps, with budgets, a protection policy, a
# flow control and a traffic policy in force, and prints at each step the
# manager's and the gateway's memory (RSS), the webhook's added DELETE
# latency (p50 of a delete it judges over p50 of one it never sees), how
# long a Cascading namespace's DELETE takes to be denied, and the
# gateway's overhead (p50 of a GET through it over p50 direct).
#
# Usage: hack/scale.sh [PODS...]      (default: 100 5000 15000 35000)
# Nodes grow with the pods, one per 14 (2,500 at 35,000), at least 10.
# SCALE_DIR (default /tmp/rampart-scale-PID) holds the cluster; it is
# stopped at the end unless SCALE_KEEP=1. SCALE_PARALLEL (default 4)
# kubectl processes create pods.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=("${@:-100 5000 15000 35000}")
read -r -a steps <<<"${steps[*]}"
dir=${SCALE_DIR:-/tmp/rampart-scale-$$}
parallel=${SCALE_PARALLEL:-4}
per_ns=500
make -s build assets >/dev/null
go build -o bin/scaleprobe ./hack/scaleprobe
assets=${RAMPART_ASSETS:-$PWD/bin/k8s}
k() { "$assets/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

bin/rampart up --detach --dir "$dir" --gateway --nodes 10 --assets "$assets" >"$dir.up.log" 2>&1 ||
	{ cat "$dir.up.log"; exit 1; }
[ "${SCALE_KEEP:-}" = 1 ] || trap 'bin/rampart down --dir "$dir" >/dev/null 2>&1 || true' EXIT
pid() { python3 -c "import json,sys;print([p['pid'] for p in json.load(open('$dir/processes.json'))['processes'] if p['name']==sys.argv[1]][0])" "$1"; }
rss() { awk '/^VmRSS/ {printf "%.0f", $2/1024}' "/proc/$(pid "$1")/status"; }

# Protections in force for every step.
k apply -f - >/dev/null <<'YAML'
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: scale-namespaces}
spec:
  resources: [{apiGroups: [""], resources: [namespaces]}]
  objectSelector: {matchLabels: {rampart-scale: "true"}}
  protection: Cascading
---
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: scale-pods}
spec:
  resources: [{apiGroups: [""], resources: [pods]}]
  namespaceSelector: {matchLabels: {rampart-scale: "true"}}
  limits: [{count: 1000, window: 10m}]
---
apiVersion: rampart.io/v1alpha1
kind: TrafficPolicy
metadata: {name: scale-lists}
spec:
  precedence: 100
  match: [{groups: ["system:authenticated"], verbs: [list], resources: [{apiGroups: [""], resources: [pods]}], namespaces: ["*"]}]
  action: Limit
  limit: {qps: 50, burst: 100, maxInFlight: 20, key: Policy}
YAML

# nodes N: kwok nodes kwok-node-0 .. N-1 (rampart up made the first 10).
nodes() {
	local want=$1 have
	have=$(k get nodes -l type=kwok --no-headers | wc -l)
	[ "$have" -lt "$want" ] || return 0
	python3 - "$have" "$want" <<'PY' | k create -f - >/dev/null
import json, sys
have, want = int(sys.argv[1]), int(sys.argv[2])
items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"kwok-node-{i}",
  "labels": {"type": "kwok", "rampart.io/simulated-node": "true", "kubernetes.io/hostname": f"kwok-node-{i}", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
  "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
  "status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "250"}, "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250"}}}
  for i in range(have, want)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

# namespace I: scale-I, Cascading by the policy, with a budget over its pods.
namespace() {
	k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: scale-$1, labels: {rampart-scale: "true"}}
---
apiVersion: rampart.io/v1alpha1
kind: PodUnavailableBudget
metadata: {name: web, namespace: scale-$1}
spec: {selector: {matchLabels: {app: web}}, maxUnavailable: "10%"}
YAML
}

# pods NS FROM TO NODES: pods web-FROM .. web-TO-1 in NS, bound round robin.
pods() {
	python3 - "$@" <<'PY' | k create -f - >/dev/null
import json, sys
ns, lo, hi, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
items = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web-{i}", "namespace": ns, "labels": {"app": "web"}},
  "spec": {"nodeName": f"kwok-node-{i % nodes}", "tolerations": [{"operator": "Exists"}],
           "containers": [{"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
  for i in range(lo, hi)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

printf '%-7s %-6s %-8s %-12s %-12s %-14s %-13s %-18s %-13s %s\n' pods nodes running manager_MiB gateway_MiB delete_p50_ms judged_p50_ms webhook_delete_x cascading_ms gateway_get_x
have=0
for want in "${steps[@]}"; do
	nodes=$(((want + 13) / 14))
	((nodes >= 10)) || nodes=10
	nodes "$nodes"
	# Fill namespaces of per_ns pods each, SCALE_PARALLEL at a time.
	jobs=0
	while ((have < want)); do
		ns=$((have / per_ns))
		to=$((((ns + 1) * per_ns < want) ? (ns + 1) * per_ns : want))
		((have % per_ns != 0)) || namespace "$ns"
		pods "scale-$ns" $((have % per_ns)) $((to - ns * per_ns)) "$nodes" &
		jobs=$((jobs + 1))
		((jobs % parallel != 0)) || wait
		have=$to
	done
	wait
	# Let kwok run them (up to 10 minutes), then measure.
	for _ in $(seq 120); do
		running=$(k get pods -A -l app=web --field-selector status.phase=Running --no-headers 2>/dev/null | wc -l)
		((running * 100 < want * 98)) || break
		sleep 5
	done
	probe=$(bin/scaleprobe -kubeconfig "$dir/kubeconfig" -gateway-kubeconfig "$dir/kubeconfig-gateway" -cascading-namespace scale-0 -n 60)
	val() { sed -E "s/.*\\b$1=([^ ]+).*/\\1/" <<<"$probe"; }
	printf '%-7s %-6s %-8s %-12s %-12s %-14s %-13s %-18s %-13s %s\n' "$want" "$nodes" "$running" "$(rss rampart-manager)" "$(rss rampart-gateway)" \
		"$(val delete_p50_ms)" "$(val judged_delete_p50_ms)" "$(val delete_ratio)" "$(val cascading_ns_denial_ms)" "$(val gateway_ratio)"
done
