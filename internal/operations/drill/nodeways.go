package drill

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/protection/nodebudget"
)

// nodeWayNodes is the size of a node-offlining pool at full scale.
const nodeWayNodes = 200

// nodeWayFloor is the share of a pool the protected side keeps in
// service (its NodeDisruptionBudget's minAvailable).
const nodeWayFloor = 90

var nodeBudgetsGVR = windowsGVR.GroupVersion().WithResource("nodedisruptionbudgets")

// nodeOffliningWays are the node-offlining storm by each way a node
// leaves service besides a delete under a flow control (node-offlining):
// a controller acting on bad input cordons, taints, drains or deletes
// every node of a pool of simulated, Ready nodes, as fast as it can. The
// loss is the pool's nodes out of service at the end (deleted, cordoned,
// or with a NoSchedule/NoExecute taint: nodebudget.Available), counted
// from the nodes themselves. The protected side puts a
// NodeDisruptionBudget over the pool (minAvailable 90%) the moment before
// the storm, with no wait for it to be Ready: at most the floor's
// complement may leave.
var nodeOffliningWays = []Drill{
	nodeWay("cordon", "cordons", func(ctx context.Context, t Target, ns, node string) error {
		return t.patchNode(ctx, node, `{"spec":{"unschedulable":true}}`)
	}),
	nodeWay("taint", "taints NoExecute", func(ctx context.Context, t Target, ns, node string) error {
		return t.patchNode(ctx, node, `{"spec":{"taints":[{"key":"drill.rampart.io/bad-input","value":"yes","effect":"NoExecute"}]}}`)
	}),
	// A drain as node automation does it (cluster-autoscaler, Karpenter,
	// an upgrade controller): cordon, and only once the node is cordoned
	// evict its pods. kubectl drain 1.36 goes on evicting after a refused
	// cordon; the node then stays in service, its pods are the
	// PodUnavailableBudgets' to judge (docs/node-budgets.md).
	nodeWay("drain", "drains (cordon, then evict its pod)", func(ctx context.Context, t Target, ns, node string) error {
		if err := t.patchNode(ctx, node, `{"spec":{"unschedulable":true}}`); err != nil {
			return err
		}
		return t.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: ns}})
	}),
	nodeWay("delete", "deletes", func(ctx context.Context, t Target, ns, node string) error {
		return t.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	}),
}

// nodeWay is the drill of a storm taking nodes out of service by way;
// leave takes one node out (for a drain, its pod, of the same name, is in
// ns).
func nodeWay(way, verb string, leave func(ctx context.Context, t Target, ns, node string) error) Drill {
	return Drill{
		Name:     "node-offlining-" + way,
		Incident: fmt.Sprintf("a controller acting on bad input %s every node of a pool; nothing keeps a share of them in service (ByteDance report: control the frequency and safety water level of node offline)", verb),
		Run: func(ctx context.Context, t Target) (Loss, error) {
			// Small in make test (25 nodes at --scale 2): four storms
			// on both sides.
			n := nodeWayNodes
			if t.Scale > 1 {
				n = max(nodeWayNodes/(4*t.Scale), 10)
			}
			floor := (n*nodeWayFloor + 99) / 100
			pool := t.Prefix + "-" + way
			selector := "rampart.io/drill-node-pool=" + pool
			loss := Loss{Total: n, Unit: "nodes out of service"}
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("%s-%04d", pool, i)
			}
			ns := pool + "-pods"
			defer func() {
				ctx := context.Background()
				_ = t.Dynamic.Resource(nodeBudgetsGVR).Delete(ctx, pool, metav1.DeleteOptions{})
				_ = t.Client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector})
				if way == "drain" {
					t.cleanupNamespace(ns)
				}
			}()
			if err := parallel(ctx, names, func(ctx context.Context, name string) error {
				node := localcluster.SimulatedNode(name)
				node.Labels["rampart.io/drill-node-pool"] = pool
				_, err := t.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
				return err
			}); err != nil {
				return loss, err
			}
			if way == "drain" {
				if err := t.namespace(ctx, ns, nil); err != nil {
					return loss, err
				}
				if err := parallel(ctx, names, func(ctx context.Context, name string) error {
					_, err := t.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
					return err
				}); err != nil {
					return loss, err
				}
			}
			// In service, not only Ready: the lifecycle controller's
			// not-ready taint can outlive Ready a moment.
			if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
				in, err := t.inService(ctx, selector)
				return err == nil && in == n, err
			}); err != nil {
				return loss, fmt.Errorf("the %d nodes of pool %s never all in service: %w", n, pool, err)
			}
			if t.Protected {
				loss.Bound = n - floor
				u := &unstructured.Unstructured{}
				doc := fmt.Sprintf("apiVersion: rampart.io/v1alpha1\nkind: NodeDisruptionBudget\nmetadata: {name: %s}\n"+
					"spec: {nodeSelector: {matchLabels: {rampart.io/drill-node-pool: %s}}, minAvailable: %q}", pool, pool, strconv.Itoa(nodeWayFloor)+"%")
				if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
					return loss, err
				}
				if _, err := t.Dynamic.Resource(nodeBudgetsGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
					return loss, err
				}
			}
			start := time.Now()
			var refused atomic.Int32
			var denied atomic.Value
			if err := parallel(ctx, names, func(ctx context.Context, name string) error {
				err := leave(ctx, t, ns, name)
				if apierrors.IsTooManyRequests(err) || apierrors.IsForbidden(err) {
					refused.Add(1)
					denied.Store(err.Error())
					return nil
				}
				return err
			}); err != nil {
				return loss, err
			}
			took := time.Since(start)
			in, err := t.inService(ctx, selector)
			if err != nil {
				return loss, err
			}
			loss.Lost = n - in
			loss.Denied, _ = denied.Load().(string)
			loss.Measured = map[string]float64{
				"storm_s":         seconds(took),
				"refused":         float64(refused.Load()),
				"floor_nodes":     float64(floor),
				"left_in_service": float64(in),
			}
			if !t.Protected {
				loss.Measured["floor_nodes"] = 0
			}
			if way == "drain" {
				pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return loss, err
				}
				kept := 0
				for _, p := range pods.Items {
					if p.DeletionTimestamp == nil {
						kept++
					}
				}
				loss.Measured["pods_evicted"] = float64(n - kept)
			}
			return loss, nil
		},
	}
}

// patchNode merge-patches a node.
func (t Target) patchNode(ctx context.Context, node, patch string) error {
	_, err := t.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// inService counts the nodes selector selects that are in service: Ready,
// schedulable, without a NoSchedule or NoExecute taint.
func (t Target) inService(ctx context.Context, selector string) (int, error) {
	list, err := t.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, err
	}
	in := 0
	for i := range list.Items {
		if nodebudget.Available(&list.Items[i]) {
			in++
		}
	}
	return in, nil
}
