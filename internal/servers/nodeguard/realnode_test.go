package nodeguard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

// TestRealNodeGuard runs rampart node-guard where it belongs: between a
// real kubelet v1.36 and containerd, on a real node of a local cluster.
// A protected pod starts and a kubectl delete ends it as fast as without
// the guard; the kubelet-bad-restart incident (a kubelet restarted after a
// node label its pods select on was removed rejects them at re-admission
// and kills them) kills the unprotected pod and leaves the protected one
// running, with the refusal as an Event, reading Running and Ready in the
// API (not Failed), a ready endpoint of its Service, not replaced by its
// ReplicaSet, and so on with the same container once the node is fixed. A restart the pod's spec asks for
// (a failing liveness probe) still happens.
func TestRealNodeGuard(t *testing.T) {
	env, node, ns := realNodeCluster(t)
	ctx := context.Background()
	protected := map[string]string{v1alpha1.LabelExplicitDeletion: "true"}
	onNode := map[string]string{localcluster.RealNodeLabel: "true"}

	t.Run("a protected pod runs and kubectl delete ends it quickly", func(t *testing.T) {
		start := time.Now()
		pod := createPod(t, env, ns, localcluster.RealNodePod("deleted", protected, onNode))
		waitRunning(t, env, ns, pod.Name, 30*time.Second)
		t.Logf("Running %.1fs after its creation", time.Since(start).Seconds())
		start = time.Now()
		// kubectl waits until the pod is gone from the API, which the
		// kubelet does once the guard let its containers be stopped.
		if out, err := env.Kubectl(t, "delete", "pod", "-n", ns, pod.Name, "--grace-period=1"); err != nil {
			t.Fatalf("kubectl delete pod: %v: %s", err, out)
		}
		took := time.Since(start)
		t.Logf("kubectl delete pod took %.1fs", took.Seconds())
		if took > 15*time.Second {
			t.Errorf("kubectl delete pod of a protected pod took %s, want under 15s with a grace of 1s", took)
		}
		if n := runningContainers(t, env, node)[string(pod.UID)]; n != 0 {
			t.Errorf("%d containers of the deleted pod still run in containerd", n)
		}
	})

	t.Run("a failing liveness probe still restarts a protected pod's container", func(t *testing.T) {
		pod := localcluster.RealNodePod("probed", protected, onNode)
		pod.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "exit 1"}}},
			PeriodSeconds:    1,
			FailureThreshold: 1,
		}
		pod = createPod(t, env, ns, pod)
		t.Cleanup(func() { _, _ = env.Kubectl(t, "delete", "pod", "-n", ns, pod.Name, "--grace-period=1", "--wait=false") })
		start := time.Now()
		var restarts int32
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cs := range p.Status.ContainerStatuses {
				restarts = cs.RestartCount
			}
			return restarts >= 1, nil
		})
		if err != nil {
			t.Fatalf("the container of a protected pod failing its liveness probe was not restarted within a minute (%d restarts)", restarts)
		}
		t.Logf("restarted %.1fs after the pod's creation", time.Since(start).Seconds())
		if n := runningContainers(t, env, node)[string(pod.UID)]; n > 1 {
			t.Errorf("%d containers of the probed pod run at once", n)
		}
	})

	t.Run("kubelet-bad-restart kills only the unprotected pod, and the saved pod keeps serving", func(t *testing.T) {
		tier := "tier-" + strings.ToLower(rand.String(5))
		setNodeLabel(t, env, node, tier, "gold")
		selector := map[string]string{tier: "gold"}
		victim := createPod(t, env, ns, localcluster.RealNodePod("unprotected", nil, selector))
		// The protected pod is a ReplicaSet's, behind a Service: what a
		// Failed reading would cost is a replacement and an endpoint.
		app := map[string]string{"app": "gold-" + tier, v1alpha1.LabelExplicitDeletion: "true"}
		kept := startReplicaSetPod(t, env, node, ns, "gold", app, selector)
		waitRunning(t, env, ns, victim.Name, 30*time.Second)
		// The guard vouches for the pod before the incident: the
		// kubelet writes Failed before it tries the kill.
		waitCondition(t, env, ns, kept.Name, v1alpha1.ConditionContainersRunning, corev1.ConditionTrue)
		waitServing(t, env, ns, "gold", kept)

		kubelet := localcluster.KubeletName(node)
		if err := env.StopComponent(kubelet); err != nil {
			t.Fatal(err)
		}
		setNodeLabel(t, env, node, tier, "")
		if err := env.StartComponent(kubelet); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitRealNodeReady(ctx, node); err != nil {
			t.Fatal(err)
		}
		// Unprotected: rejected at re-admission and its containers gone.
		var last string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			running := runningContainers(t, env, node)[string(victim.UID)]
			last = string(p.Status.Phase) + "/" + p.Status.Reason + ", " + strconv.Itoa(running) + " containers running"
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeAffinity" && running == 0, nil
		})
		if err != nil {
			t.Fatalf("the unprotected pod was not killed by the restarted kubelet (last: %s): the incident did not happen", last)
		}
		if p, _ := env.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{}); p.DeletionTimestamp != nil {
			t.Errorf("the unprotected pod has a deletionTimestamp: someone deleted it, the kubelet did not kill it on its own")
		}
		// Protected: the kill was refused, with an Event; the runtime
		// still runs its container, and the API still reads it Running
		// and Ready, in its Service, not replaced — across the kubelet's
		// status retries (every 10 s).
		waitEvent(t, env, ns, kept.Name, nodeguard.EventReason)
		// Ready and a ready endpoint, across the kubelet's status
		// retries: saved-pods.rampart.io refuses its Ready=False
		// (PodFailed) as it would refuse Failed.
		holdServing(t, env, ns, "gold", kept, 15*time.Second)
		if p, err := env.Client.CoreV1().Pods(ns).Get(ctx, kept.Name, metav1.GetOptions{}); err == nil {
			t.Logf("the saved pod while the node is broken: phase %s, conditions %s", p.Status.Phase, podConditions(p))
		}
		// What the operator reads in the kubelet's log: the refusal, and
		// the way out it names.
		refused := kubeletLogLine(t, env, node, "Failed to update status for pod")
		t.Logf("kubelet while its writes are refused: %q", refused)
		if !strings.Contains(refused, compiled.SavedPodsName) || !strings.Contains(refused, "kubectl delete pod -n "+ns+" "+kept.Name) {
			t.Errorf("the kubelet's log shows no refusal by %s naming the way out: %q", compiled.SavedPodsName, refused)
		}
		// And in rampart status, the API server's count of them.
		if _, rampart, err := clustertest.Binaries(); err != nil {
			t.Error(err)
		} else if st, err := exec.Command(rampart, "status", "--kubeconfig", env.Kubeconfig).CombinedOutput(); err != nil ||
			!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(compiled.SavedPodsName)+`\s+\S+\s+\S+\s+[1-9]`).Match(st) {
			t.Errorf("rampart status does not count the refused status writes (%v):\n%s", err, st)
		}

		// The operator fixes the node: the label back, the kubelet
		// restarted. The pod runs on: same container, restartCount 0,
		// Ready, never replaced.
		setNodeLabel(t, env, node, tier, "gold")
		if err := env.StopComponent(kubelet); err != nil {
			t.Fatal(err)
		}
		if err := env.StartComponent(kubelet); err != nil {
			t.Fatal(err)
		}
		if err := env.WaitRealNodeReady(ctx, node); err != nil {
			t.Fatal(err)
		}
		holdServing(t, env, ns, "gold", kept, 15*time.Second)
		if p, _ := env.Client.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{}); p.Status.Phase != corev1.PodFailed {
			t.Errorf("the unprotected pod reads %s after the fix, want Failed for good", p.Status.Phase)
		}
	})
}

// startReplicaSetPod runs a one-replica ReplicaSet name of the real
// node's pod template, labelled labels, behind a Service of the same
// name, and returns its pod once it runs.
func startReplicaSetPod(t *testing.T, env *clustertest.Env, node, ns, name string, labels, nodeSelector map[string]string) clustertest.RealPod {
	t.Helper()
	ctx := context.Background()
	tmpl := localcluster.RealNodePod("", labels, nodeSelector)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": labels["app"]}},
		Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
	}}
	if _, err := env.Client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create replicaset %s: %v", name, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": labels["app"]},
		Ports:    []corev1.ServicePort{{Port: 80}},
	}}
	if _, err := env.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = env.Kubectl(t, "delete", "replicaset", "-n", ns, name, "--wait=false")
		_, _ = env.Kubectl(t, "delete", "pod", "-n", ns, "-l", "app="+labels["app"], "--grace-period=1", "--wait=false")
	})
	var pod corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := replicaSetPods(t, env, ns, labels["app"])
		if len(pods) == 1 {
			pod = pods[0]
		}
		return len(pods) == 1, nil
	})
	if err != nil {
		t.Fatalf("replicaset %s made no pod within a minute", name)
	}
	return env.RealPodOf(t, node, ns, pod.Name, pod.UID)
}

func replicaSetPods(t *testing.T, env *clustertest.Env, ns, app string) []corev1.Pod {
	t.Helper()
	list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatalf("list pods app=%s: %v", app, err)
	}
	return list.Items
}

// serving says how the pod falls short of serving as it did when it
// started: kept running (same container, restartCount 0, Running, see
// RealPodChange), Ready, its ReplicaSet's only pod, and a ready endpoint
// of its Service. "" when it serves.
func serving(ctx context.Context, t *testing.T, env *clustertest.Env, service string, p clustertest.RealPod) string {
	t.Helper()
	if change := env.RealPodChange(ctx, t, p); change != "" {
		return change
	}
	pod, err := env.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	podReady := false
	for _, c := range pod.Status.Conditions {
		podReady = podReady || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	}
	if !podReady {
		return "not Ready: " + podConditions(pod)
	}
	if pods := replicaSetPods(t, env, p.Namespace, pod.Labels["app"]); len(pods) != 1 {
		return strconv.Itoa(len(pods)) + " pods of its ReplicaSet: it was replaced"
	}
	slices, err := env.Client.DiscoveryV1().EndpointSlices(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return err.Error()
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.UID == p.UID && e.Conditions.Ready != nil && *e.Conditions.Ready {
				return ""
			}
		}
	}
	return fmt.Sprintf("not a ready endpoint of service %s (slices: %+v)", service, slices.Items)
}

// waitServing waits until the pod serves (see serving).
func waitServing(t *testing.T, env *clustertest.Env, ns, service string, p clustertest.RealPod) {
	t.Helper()
	var last string
	// Each look gets the time it needs: a look cut by the poll's
	// deadline would hide the last reason.
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = serving(context.Background(), t, env, service, p)
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s does not serve within 30s: %s", ns, p.Name, last)
	}
}

// holdServing fails t unless the pod serves for d from now (after a
// first 30 s at most for it to serve again).
func holdServing(t *testing.T, env *clustertest.Env, ns, service string, p clustertest.RealPod, d time.Duration) {
	t.Helper()
	waitServing(t, env, ns, service, p)
	until := time.Now().Add(d)
	for time.Now().Before(until) {
		if why := serving(context.Background(), t, env, service, p); why != "" {
			t.Fatalf("pod %s/%s stopped serving: %s", ns, p.Name, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func waitCondition(t *testing.T, env *clustertest.Env, ns, pod string, typ corev1.PodConditionType, status corev1.ConditionStatus) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == typ && c.Status == status {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s has no condition %s=%s within 30s", ns, pod, typ, status)
	}
}

// kubeletLogLine is the last line of the node's kubelet log holding
// substr, "" for none.
func kubeletLogLine(t *testing.T, env *clustertest.Env, node, substr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.Cluster.Dir, "logs", localcluster.KubeletName(node)+".log"))
	if err != nil {
		return err.Error()
	}
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, substr) {
			line = l
		}
	}
	return line
}

// TestRealNodeGuardDown stops a real node's node guard, as a crash or an
// upgrade of it would: the kubelet loses its runtime endpoint while
// containerd runs on. What a user sees: the Node turns Ready=False with the
// kubelet's "container runtime is down" message, the pods stay Running in
// the API and their containers keep running in containerd, neither killed
// nor restarted, protected or not; once the guard is back the Node is
// Ready again and the pods run the same containers, restartCount 0.
func TestRealNodeGuardDown(t *testing.T) {
	env, node, ns := realNodeCluster(t)
	ctx := context.Background()
	onNode := map[string]string{localcluster.RealNodeLabel: "true"}
	pods := []clustertest.RealPod{
		env.StartRealPod(t, node, ns, localcluster.RealNodePod("protected", map[string]string{v1alpha1.LabelExplicitDeletion: "true"}, onNode)),
		env.StartRealPod(t, node, ns, localcluster.RealNodePod("unprotected", nil, onNode)),
	}
	// unchanged fails the test at the first pod killed or restarted.
	unchanged := func(ctx context.Context) {
		t.Helper()
		for _, p := range pods {
			if change := env.RealPodChange(ctx, t, p); change != "" {
				t.Fatalf("pod %s changed: %s", p.Name, change)
			}
		}
	}

	guard := localcluster.NodeGuardName(node)
	stopped := time.Now()
	if err := env.StopComponent(guard); err != nil {
		t.Fatal(err)
	}
	// The kubelet calls the runtime's Status every 5 s and reports it
	// down once 30 s have passed without an answer, at its next node
	// status update.
	var ready corev1.NodeCondition
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		unchanged(ctx)
		ready = nodeReadyCondition(t, env, node)
		return ready.Status == corev1.ConditionFalse, nil
	})
	if err != nil {
		t.Fatalf("node %s still Ready=%s (%s) 3 minutes after its node guard stopped", node, ready.Status, ready.Message)
	}
	t.Logf("Ready=False %.1fs after the guard stopped: %s: %s", time.Since(stopped).Seconds(), ready.Reason, ready.Message)
	if !strings.Contains(ready.Message, "container runtime is down") {
		t.Errorf("node %s is not Ready for another reason than its runtime: %s", node, ready.Message)
	}
	// The node controller taints the node NoExecute; the pods tolerate
	// that for 300 s (the API server's DefaultTolerationSeconds), after
	// which they would be evicted: the guard must be back before then.
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		unchanged(ctx)
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady && taint.Effect == corev1.TaintEffectNoExecute {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("node %s not tainted %s:NoExecute within a minute of Ready=False", node, corev1.TaintNodeNotReady)
	}
	t.Logf("tainted %s:NoExecute %.1fs after the guard stopped", corev1.TaintNodeNotReady, time.Since(stopped).Seconds())
	for _, p := range pods {
		pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var tolerated *int64
		for _, tol := range pod.Spec.Tolerations {
			if tol.Key == corev1.TaintNodeNotReady && tol.Effect == corev1.TaintEffectNoExecute {
				tolerated = tol.TolerationSeconds
			}
		}
		if tolerated == nil || *tolerated != 300 {
			t.Errorf("pod %s tolerates %s:NoExecute for %v s, want 300", p.Name, corev1.TaintNodeNotReady, tolerated)
		}
		t.Logf("pod %s while the guard is down: phase %s, conditions %s", p.Name, pod.Status.Phase, podConditions(pod))
	}

	started := time.Now()
	if err := env.StartComponent(guard); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := env.WaitRealNodeReady(rctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("Ready again %.1fs after the guard started (down %.1fs in all)", time.Since(started).Seconds(), time.Since(stopped).Seconds())
	// The kubelet syncs every pod again once the runtime answers; a kill
	// or a restart would show within seconds.
	hold := time.Now().Add(15 * time.Second)
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		unchanged(ctx)
		return time.Now().After(hold), nil
	})
}

func podConditions(p *corev1.Pod) string {
	var out []string
	for _, c := range p.Status.Conditions {
		s := string(c.Type) + "=" + string(c.Status)
		if c.Reason != "" {
			s += "(" + c.Reason + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func nodeReadyCondition(t *testing.T, env *clustertest.Env, node string) corev1.NodeCondition {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Message: "no Ready condition"}
}

// realNodeCluster starts a cluster of the test's own (the manager
// included) with one real node, and a namespace.
func realNodeCluster(t *testing.T) (env *clustertest.Env, node, ns string) {
	t.Helper()
	env = clustertest.Start(t, localcluster.Options{Nodes: 1})
	return env, env.RealNodes(t, 1)[0], env.Namespace(t)
}

func createPod(t *testing.T, env *clustertest.Env, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return created
}

func waitRunning(t *testing.T, env *clustertest.Env, ns, name string, timeout time.Duration) {
	t.Helper()
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not Running within %s (phase %q): %v", ns, name, timeout, phase, err)
	}
}

// setNodeLabel sets key=value on the node, or removes key for "".
func setNodeLabel(t *testing.T, env *clustertest.Env, node, key, value string) {
	t.Helper()
	arg := key + "=" + value
	if value == "" {
		arg = key + "-"
	}
	if out, err := env.Kubectl(t, "label", "node", node, arg, "--overwrite"); err != nil {
		t.Fatalf("kubectl label node %s %s: %v: %s", node, arg, err, out)
	}
}

func runningContainers(t *testing.T, env *clustertest.Env, node string) map[string]int {
	t.Helper()
	running := map[string]int{}
	for _, c := range env.Containers(t, node) {
		if c.Running {
			running[c.PodUID]++
		}
	}
	return running
}

func waitEvent(t *testing.T, env *clustertest.Env, ns, pod, reason string) {
	t.Helper()
	selector := fields.Set{"involvedObject.name": pod, "reason": reason, "type": corev1.EventTypeWarning}.String()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		return err == nil && len(list.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("no %s Warning Event on pod %s/%s", reason, ns, pod)
	}
}
