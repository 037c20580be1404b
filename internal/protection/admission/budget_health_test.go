package admission_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// nodeMonitorGracePeriod is kube-controller-manager's default
// --node-monitor-grace-period (the local cluster keeps it): how long a
// node may go unheard before it is NotReady.
const nodeMonitorGracePeriod = 50 * time.Second

// Do no harm: a budgeted Deployment's pod on a node that stops
// heartbeating is deleted by the node lifecycle controller and replaced,
// within the grace period + the pod's toleration + 30 s, as without
// Rampart — the pod is already unavailable, so it costs the budget
// nothing. Two of the three nodes of another budget's pods stopping at
// once look like a partition, not a dead node: that budget holds, and the
// denial says why. A flow control counting a third pool's pod deletes
// lets a dead node's pods all go, uncounted.
func TestBudgetLetsADeadNodesPodGoAndHoldsAPartition(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	const toleration = 5
	pools := map[string][]string{"dead": nil, "part": nil}
	for pool := range pools {
		for _, s := range []string{"a", "b", "c"} {
			name := fmt.Sprintf("%s-%s-%s", ns, pool, s)
			pools[pool] = append(pools[pool], name)
			n := localcluster.SimulatedNode(name)
			n.Labels["rampart.io/test-pool"] = ns + "-" + pool
			// Only this test's pods land here.
			n.Spec.Taints = []corev1.Taint{{Key: "rampart.io/test-pool", Value: ns + "-" + pool, Effect: corev1.TaintEffectNoSchedule}}
			if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// Back to kwok, so the pods left there end, then gone.
				_ = env.SetHeartbeat(ctx, name, true)
				_ = env.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			})
		}
	}
	// A third pool of one node runs three pods that a flow control of one
	// pod delete an hour counts: a dead node's pods are not its to count.
	flowNode := ns + "-flow"
	{
		n := localcluster.SimulatedNode(flowNode)
		n.Labels["rampart.io/test-pool"] = flowNode
		n.Spec.Taints = []corev1.Taint{{Key: "rampart.io/test-pool", Value: flowNode, Effect: corev1.TaintEffectNoSchedule}}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.SetHeartbeat(ctx, flowNode, true)
			_ = env.Client.CoreV1().Nodes().Delete(ctx, flowNode, metav1.DeleteOptions{})
		})
	}
	fc := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [pods]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {app: flow}}
  limits: [{count: 1, window: 1h}]`, ns, ns)), &fc.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(flowControls).Create(ctx, fc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Dynamic.Resource(flowControls).Delete(ctx, ns, metav1.DeleteOptions{}) })
	// Every node Ready first: the spread counts only nodes without the
	// not-ready taint.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range append(append([]string{flowNode}, pools["dead"]...), pools["part"]...) {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(n.Spec.Taints) != 1 {
				return false, nil
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the test's nodes never Ready and untainted: %v", err)
	}
	for pool := range pools {
		createSpreadDeployment(t, env, ns, pool, ns+"-"+pool, toleration)
		createBudget(t, env, ns, pool, fmt.Sprintf(`{selector: {matchLabels: {app: %s}}, maxUnavailable: 1}`, pool))
	}
	createSpreadDeployment(t, env, ns, "flow", flowNode, toleration)
	flowPods := env.WaitPodsRunning(t, ns, "app=flow", 3, 2*time.Minute)
	onNode := map[string]string{} // node → pod
	for pool := range pools {
		for _, p := range env.WaitPodsRunning(t, ns, "app="+pool, 3, 2*time.Minute) {
			onNode[p.Spec.NodeName] = p.Name
		}
		waitBudget(t, env, ns, pool, time.Minute, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
			return s.CurrentAvailable == 3 && s.UnavailableAllowed == 1
		})
	}
	for _, node := range append(slices.Clone(pools["dead"]), pools["part"]...) {
		if onNode[node] == "" {
			t.Fatalf("pods not spread one per node: %v", onNode)
		}
	}
	deadPod := onNode[pools["dead"][0]]
	partPods := []string{onNode[pools["part"][0]], onNode[pools["part"][1]]}

	if err := errors.Join(env.SetHeartbeat(ctx, pools["dead"][0], false), env.SetHeartbeat(ctx, flowNode, false)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The partition's two nodes stop together, 15 s later: the node
	// lifecycle controller taints one node every 10 s at most
	// (--node-eviction-rate 0.1), and the dead node is timed as a dead node
	// alone would be, not behind them.
	partitioned := make(chan error, 1)
	go func() {
		time.Sleep(15 * time.Second)
		partitioned <- errors.Join(env.SetHeartbeat(ctx, pools["part"][0], false), env.SetHeartbeat(ctx, pools["part"][1], false))
	}()
	// The dead node's pod is deleted and replaced.
	bound := nodeMonitorGracePeriod + toleration*time.Second + 30*time.Second
	var last string
	var goneAfter time.Duration
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, bound+time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(ns).Get(ctx, deadPod, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		if gone && goneAfter == 0 {
			goneAfter = time.Since(start)
		}
		d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "dead", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = fmt.Sprintf("pod %s gone: %t; deployment ready %d of 3", deadPod, gone, d.Status.ReadyReplicas)
		return gone && d.Status.ReadyReplicas == 3, nil
	})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("the dead node's pod was not replaced in %s: %s; events: %s", took.Round(time.Second), last, podEvents(t, env, ns, deadPod))
	}
	t.Logf("dead node: pod %s deleted %.1fs and replaced %.1fs after its node stopped (bound %s)", deadPod, goneAfter.Seconds(), took.Seconds(), bound)
	if took > bound {
		t.Errorf("replaced after %s, over the bound of grace period + toleration + 30s = %s", took.Round(time.Second), bound)
	}
	if ev := podEvents(t, env, ns, deadPod); strings.Contains(ev, "DisruptionDenied") {
		t.Errorf("the dead node's pod was refused on the way: %s", ev)
	}

	// The flow control's dead node: its three pods deleted (their
	// replacements cannot run anywhere, the node is their pool's only).
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, bound+time.Minute, true, func(ctx context.Context) (bool, error) {
		left := 0
		for _, p := range flowPods {
			if _, err := env.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left++
			}
		}
		last = fmt.Sprintf("%d of the dead node's 3 pods left", left)
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("%s %s after their node stopped, under a flow control of 1 delete an hour; events: %s", last,
			time.Since(start).Round(time.Second), podEvents(t, env, ns, flowPods[2].Name))
	}
	t.Logf("flow control: the dead node's 3 pods deleted %.1fs after it stopped, none counted", time.Since(start).Seconds())
	if took := time.Since(start); took > bound+10*time.Second {
		t.Errorf("deleted after %s, over the bound of grace period + toleration + 30s + 10s (the node controller taints one node per 10 s) = %s", took.Round(time.Second), bound+10*time.Second)
	}

	// The partition: the node controller's deletes were refused, saying why.
	if err := <-partitioned; err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, bound+time.Minute, true, func(ctx context.Context) (bool, error) {
		return strings.Contains(podEvents(t, env, ns, partPods[0]), "DisruptionDenied") &&
			strings.Contains(podEvents(t, env, ns, partPods[1]), "DisruptionDenied"), nil
	})
	if err != nil {
		t.Fatalf("no denial of the partition's pods: %s; %s", podEvents(t, env, ns, partPods[0]), podEvents(t, env, ns, partPods[1]))
	}
	t.Logf("partition: deletes of both pods refused %.1fs after the dead node stopped", time.Since(start).Seconds())
	if ev := podEvents(t, env, ns, partPods[0]); !strings.Contains(ev, "2 of the 3 nodes this budget's pods run on are NotReady at once") ||
		!strings.Contains(ev, "node-controller") {
		t.Errorf("the partition's denial does not say why or whom: %s", ev)
	}
	for _, name := range partPods {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Errorf("pod %s behind the partition was deleted (%v)", name, err)
		}
	}
}

// createSpreadDeployment creates a 3-replica Deployment, one pod per node
// of the pool, tolerating the node controller's unreachable and not-ready
// taints for toleration seconds.
func createSpreadDeployment(t *testing.T, env *clustertest.Env, ns, app, pool string, toleration int64) {
	t.Helper()
	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{{Name: "app", Image: "web:1"}},
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
					NodeSelector:                  map[string]string{"rampart.io/test-pool": pool},
					Tolerations: []corev1.Toleration{
						{Key: "rampart.io/test-pool", Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule},
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(toleration)},
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(toleration)},
					},
					// One per node; a node the pod cannot go to (tainted
					// unreachable) does not count.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
					}},
				},
			},
		},
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podEvents are the reasons and messages of a pod's Events, one a line.
func podEvents(t *testing.T, env *clustertest.Env, ns, pod string) string {
	t.Helper()
	evs, err := env.Client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		if e.Regarding.Name == pod {
			fmt.Fprintf(&b, "%s: %s\n", e.Reason, e.Note)
		}
	}
	return b.String()
}

// Do no harm: the garbage collector removing a deleted Deployment's pods is
// not held back by a budget over them, even one that allows nothing (the
// workload's delete was the decision; a PodDisruptionBudget does not
// judge deletes at all). While the Deployment lives, the same budget still
// refuses a delete of one of its pods.
func TestBudgetLetsTheGarbageCollectorRemoveADeletedWorkloadsPods(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	if out, err := env.Kubectl(t, "create", "deployment", "web", "-n", ns, "--image=web:1", "--replicas=3"); err != nil {
		t.Fatal(out)
	}
	pods := env.WaitPodsRunning(t, ns, "app=web", 3, time.Minute)
	createBudget(t, env, ns, "web", `{selector: {matchLabels: {app: web}}, minAvailable: 3}`)
	waitBudget(t, env, ns, "web", time.Minute, func(s v1alpha1.PodUnavailableBudgetStatus) bool { return s.CurrentAvailable == 3 })
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("delete of a live Deployment's pod under a budget that allows nothing: %v", err)
	}
	start := time.Now()
	if err := env.Client.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	var left int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, nil
		}
		left = len(list.Items)
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("%d pods of the deleted Deployment left after a minute; events: %s", left, podEvents(t, env, ns, pods[1].Name))
	}
	t.Logf("the garbage collector removed the deleted Deployment's 3 pods in %.1fs", time.Since(start).Seconds())
}
