package drill

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
)

// nodeMonitorGracePeriod is kube-controller-manager's default
// --node-monitor-grace-period (50 s since Kubernetes 1.32): how long a node
// may miss its heartbeats before it is Unknown and tainted unreachable.
const nodeMonitorGracePeriod = 50 * time.Second

// deadNodeToleration is how long the node-dies pods stay on a node that
// is unreachable or not ready.
const deadNodeToleration = 5

// nodeDies: a node stops its heartbeat (see killNode) under a 3-replica
// Deployment, one pod a node, whose pods
// tolerate an unreachable node for 5 s. The node lifecycle controller
// marks it Unknown after its grace period and taints it; the taint
// eviction controller deletes the pod; the ReplicaSet replaces it on a
// spare node. Protected, a PodUnavailableBudget (maxUnavailable 1) and a
// gang budget per node (groupBy kubernetes.io/hostname, read from the
// pods' nodes, at most one node's pods disrupted at once) cover the pods:
// a pod already unavailable on a dead node should cost either nothing.
var nodeDies = Operation{
	Name: "node-dies",
	What: "a node stops its heartbeat under a 3-replica Deployment whose pods tolerate an unreachable node for 5 s; " +
		"until its pod is deleted and a replacement Ready (protected: a PodUnavailableBudget, maxUnavailable 1, and a gang budget per node)",
	Beside: true,
	Run: func(ctx context.Context, t Target) (Timing, error) {
		var tm Timing
		ns := t.Prefix + "-nodedies"
		pool := t.Prefix + "-nodedies"
		doomed := t.Prefix + "-doomed"
		var nodes []string
		defer func() {
			t.cleanupNamespace(ns)
			t.forceDeletePods(ns)
			t.deleteDeadNode(doomed)
			t.releasePool(nodes)
		}()
		if err := t.opsNamespace(ctx, ns); err != nil {
			return tm, err
		}
		node := localcluster.SimulatedNode(doomed)
		node.Labels["rampart.io/drill-pool"] = pool
		// Only this operation's pods may run there: it runs beside the
		// others, whose pods must not die with it.
		node.Spec.Taints = []corev1.Taint{{Key: "rampart.io/drill-pool", Value: pool, Effect: corev1.TaintEffectNoSchedule}}
		if _, err := t.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return tm, err
		}
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			n, err := t.Client.CoreV1().Nodes().Get(ctx, doomed, metav1.GetOptions{})
			return err == nil && localcluster.NodeReady(n), nil
		}); err != nil {
			return tm, fmt.Errorf("node %s never Ready: %w", doomed, err)
		}
		var err error
		if nodes, err = t.poolNodes(ctx, pool, 2); err != nil {
			return tm, err
		}
		d := appDeployment("web", 3, time.Second)
		spec := &d.Spec.Template.Spec
		spec.NodeSelector = map[string]string{"rampart.io/drill-pool": pool}
		// One pod a node, so that the dead node holds exactly one.
		spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: corev1.LabelHostname,
			}},
		}}
		spec.Tolerations = []corev1.Toleration{{Key: "rampart.io/drill-pool", Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule}}
		for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](deadNodeToleration)})
		}
		if t.Protected {
			if err := t.budget(ctx, ns, `
apiVersion: rampart.io/v1alpha1
kind: PodUnavailableBudget
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  maxUnavailable: 1`); err != nil {
				return tm, err
			}
			if err := t.budget(ctx, ns, `
apiVersion: rampart.io/v1alpha1
kind: PodUnavailableBudget
metadata: {name: web-per-node}
spec:
  selector: {matchLabels: {app: web}}
  groupBy: {labelKey: kubernetes.io/hostname}
  gang: true
  maxGroupsDisrupted: 1`); err != nil {
				return tm, err
			}
		}
		if err := t.createApp(ctx, ns, d, 0); err != nil {
			return tm, err
		}
		if t.Protected {
			for _, b := range []string{"web", "web-per-node"} {
				if err := t.waitBudget(ctx, ns, b, 1); err != nil {
					return tm, err
				}
			}
		}
		onDoomed, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + doomed})
		if err != nil || len(onDoomed.Items) != 1 {
			return tm, fmt.Errorf("want one pod on %s: %v", doomed, err)
		}
		victim := onDoomed.Items[0].Name
		// A spare node for the replacement.
		spare, err := t.poolNodes(ctx, pool, 1)
		nodes = append(nodes, spare...)
		if err != nil {
			return tm, err
		}
		refusals, err := t.watchRefusals(ctx, []string{ns})
		if err != nil {
			return tm, err
		}

		start := time.Now()
		if err := t.killNode(ctx, doomed); err != nil {
			return tm, err
		}
		timeout := nodeMonitorGracePeriod + deadNodeToleration*time.Second + time.Minute
		tm.Measured = map[string]float64{}
		err = poll(ctx, timeout, func(ctx context.Context) (bool, error) {
			if _, ok := tm.Measured["node_tainted_s"]; !ok {
				if n, err := t.Client.CoreV1().Nodes().Get(ctx, doomed, metav1.GetOptions{}); err == nil && tainted(n, corev1.TaintNodeUnreachable) {
					tm.Measured["node_tainted_s"] = seconds(time.Since(start))
				}
			}
			if _, ok := tm.Measured["pod_deleted_s"]; !ok {
				p, err := t.Client.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
					tm.Measured["pod_deleted_s"] = seconds(time.Since(start))
				}
			}
			ready, err := t.readyPods(ctx, ns, "app=web")
			_, deleted := tm.Measured["pod_deleted_s"]
			return err == nil && deleted && ready == 3, nil
		})
		tm.Took, tm.Done = time.Since(start), err == nil
		if err != nil && !wait.Interrupted(err) {
			return tm, err
		}
		return tm, refusals.settle(ctx, &tm, nil, nil)
	},
}

// killNode stops a simulated node's heartbeat, as if its kubelet had
// died (localcluster.SetNodeHeartbeat: kwok's Lease of the node taken
// over; removing kwok's annotation alone does not stop it).
func (t Target) killNode(ctx context.Context, node string) error {
	return localcluster.SetNodeHeartbeat(ctx, t.Client, node, false)
}

// deleteDeadNode gives a node killNode killed back to kwok and deletes it:
// kwok lets go of a node's lease when it sees the node deleted.
func (t Target) deleteDeadNode(node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = localcluster.SetNodeHeartbeat(ctx, t.Client, node, true)
	_ = t.Client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
}

func tainted(n *corev1.Node, key string) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key && taint.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}

// poolNodes labels n schedulable simulated nodes that are in no pool yet
// as pool name, and returns them.
func (t Target) poolNodes(ctx context.Context, name string, n int) ([]string, error) {
	nodes, err := t.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!rampart.io/drill-pool"})
	if err != nil {
		return nil, err
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"rampart.io/drill-pool":%q}}}`, name))
	var out []string
	for _, node := range nodes.Items {
		if len(out) == n {
			break
		}
		if node.Spec.Unschedulable || node.Annotations[localcluster.KwokNodeAnnotation] != "fake" || !localcluster.NodeReady(&node) {
			continue
		}
		if _, err := t.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return out, err
		}
		out = append(out, node.Name)
	}
	if len(out) < n {
		return out, fmt.Errorf("the operation needs %d free simulated nodes, the cluster has %d", n, len(out))
	}
	return out, nil
}

// forceDeletePods deletes what is left of a namespace's pods at once, as
// an operator does for pods of a node that will not come back; the
// namespace is being deleted, so no budget holds them.
func (t Target) forceDeletePods(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		_ = t.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
}

// budget creates a PodUnavailableBudget in ns.
func (t Target) budget(ctx context.Context, ns, manifest string) error {
	u, err := unstructuredFrom(manifest)
	if err != nil {
		return err
	}
	_, err = t.Dynamic.Resource(windowsGVR.GroupVersion().WithResource("podunavailablebudgets")).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// kubectlDrainRetry is how long kubectl drain waits before it asks again
// for an eviction refused with 429.
const kubectlDrainRetry = 5 * time.Second

// drainNode: a node holding a third of a Deployment's pods is drained as
// kubectl drain does it: cordoned, every pod evicted at once, an eviction
// refused with 429 asked again 5 s later, until every pod is gone. The
// application ships a PodDisruptionBudget (maxUnavailable 1) on both
// sides; the protected side also asks for a generated budget per node
// (rampart.io/generate-pub-group-by: kubernetes.io/hostname, the
// rollout's 25% of each node's pods). A budget's
// 429 to an eviction is what drain waits on, like the PDB's, and is not
// counted as a refusal: the time says whether it held the drain back.
var drainNode = Operation{
	Name: "drain",
	What: "kubectl drain (cordon, evict, retry a 429 after 5 s) of a node holding a third of a 12-replica Deployment " +
		"under a PodDisruptionBudget, maxUnavailable 1 (protected: also rampart.io/generate-pub per node)",
	Run: func(ctx context.Context, t Target) (Timing, error) {
		var tm Timing
		ns := t.Prefix + "-drain"
		replicas := int32(max(12/t.Scale, 6))
		var nodes []string
		defer func() {
			t.cleanupNamespace(ns)
			t.releasePool(nodes)
		}()
		if err := t.opsNamespace(ctx, ns); err != nil {
			return tm, err
		}
		var err error
		if nodes, err = t.poolNodes(ctx, t.Prefix+"-drain", 3); err != nil {
			return tm, err
		}
		d := appDeployment("web", replicas, 2*time.Second)
		d.Spec.Template.Spec.NodeSelector = map[string]string{"rampart.io/drill-pool": t.Prefix + "-drain"}
		// Evenly over the pool; a cordoned node (tainted unschedulable)
		// leaves the spread.
		d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
		}}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		}}
		if _, err := t.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			return tm, err
		}
		allows := t.generatedBudget(d)
		if t.Protected {
			// Per node: each node's pods allow the rollout's 25% (at least
			// one), and no cap on the nodes at once.
			d.Annotations[v1alpha1.AnnotationGeneratePUBGroupBy] = corev1.LabelHostname
			allows = int64(len(nodes))
		}
		if err := t.createApp(ctx, ns, d, allows); err != nil {
			return tm, err
		}
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			p, err := t.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && p.Status.DisruptionsAllowed == 1, nil
		}); err != nil {
			return tm, fmt.Errorf("the PodDisruptionBudget never allowed a disruption: %w", err)
		}
		drained := nodes[0]
		pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + drained})
		if err != nil {
			return tm, err
		}
		refusals, err := t.watchRefusals(ctx, []string{ns})
		if err != nil {
			return tm, err
		}

		start := time.Now()
		deadline := start.Add(3 * time.Minute)
		var retried atomic.Int32
		retry := func(f func() error) error {
			for {
				err := f()
				switch {
				case err == nil || apierrors.IsNotFound(err):
					return nil
				case time.Now().After(deadline):
					return errDrainTimedOut
				case !apierrors.IsTooManyRequests(err):
					// kubectl drain gives up on any other error; its user
					// runs it again.
				}
				retried.Add(1)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(kubectlDrainRetry):
				}
			}
		}
		err = t.drain(ctx, ns, drained, retry)
		if err == nil {
			// kubectl drain returns once every evicted pod is gone.
			err = poll(ctx, time.Until(deadline), func(ctx context.Context) (bool, error) {
				left, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + drained})
				return err == nil && len(left.Items) == 0, nil
			})
		}
		tm.Took, tm.Done = time.Since(start), err == nil
		if err != nil && err != errDrainTimedOut && !wait.Interrupted(err) {
			return tm, err
		}
		tm.Measured = map[string]float64{"pods_drained": float64(len(pods.Items)), "evictions_retried": float64(retried.Load())}
		return tm, refusals.settle(ctx, &tm, nil, func(r rejection) bool {
			return r.Hook == pub.EvictionWebhookName && r.Code == "429"
		})
	},
}

var errDrainTimedOut = fmt.Errorf("drain timed out")

func unstructuredFrom(manifest string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	return u, yaml.Unmarshal([]byte(manifest), &u.Object)
}
