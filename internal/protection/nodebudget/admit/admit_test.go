package admit_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/nodebudget"
)

func TestMain(m *testing.M) { clustertest.Main(m, localcluster.Options{}) }

var budgets = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "nodedisruptionbudgets"}

// pool makes n simulated nodes labelled pool=name, Ready (kwok).
func pool(t testing.TB, env *clustertest.Env, name string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	for i := range n {
		node := localcluster.SimulatedNode(fmt.Sprintf("%s-%d", name, i))
		node.Labels["pool"] = name
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, node.Name)
	}
	t.Cleanup(func() {
		for _, n := range names {
			_ = env.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	// In service, not only Ready: a new node carries the lifecycle
	// controller's node.kubernetes.io/not-ready NoSchedule taint a moment
	// longer, and a node so tainted is out of service already (neither
	// counted nor refused). Waiting for Ready alone let a departure pass
	// uncounted once in CI.
	waitFor(t, "the pool's nodes in service", 2*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "pool=" + name})
		if err != nil {
			return false, err
		}
		in := 0
		for i := range list.Items {
			if nodebudget.Available(&list.Items[i]) {
				in++
			}
		}
		return in == n, nil
	})
	return names
}

func waitFor(t testing.TB, what string, timeout time.Duration, f wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, f); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// create makes a NodeDisruptionBudget and returns as soon as the API
// accepted it: no wait for Ready.
func create(t testing.TB, env *clustertest.Env, doc string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: rampart.io/v1alpha1\nkind: NodeDisruptionBudget\n"+doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(budgets).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(budgets).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	})
}

func patch(env *clustertest.Env, node, body string) error {
	_, err := env.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	return err
}

func unschedulable(t *testing.T, env *clustertest.Env, names []string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		node, err := env.Client.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Spec.Unschedulable {
			out = append(out, n)
		}
	}
	return out
}

// A NodeDisruptionBudget holds from the moment the API accepts it: cordons
// of all six nodes of a pool sent at once, right after, let exactly two
// through with a floor of four (counted from the nodes, not from
// Rampart's answers), and the refusals say how to proceed. kubectl drain
// and a user's taint stop at the floor too; an uncordon lets the next
// cordon through.
func TestNodeBudgetHoldsTheFloorAtOnce(t *testing.T) {
	env := clustertest.Get(t)
	name := "floor"
	nodes := pool(t, env, name, 6)
	create(t, env, fmt.Sprintf("metadata: {name: %s}\nspec: {nodeSelector: {matchLabels: {pool: %s}}, minAvailable: 4}", name, name))

	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = patch(env, n, `{"spec":{"unschedulable":true}}`)
		}()
	}
	wg.Wait()
	admitted := 0
	for i, err := range errs {
		switch {
		case err == nil:
			admitted++
		case !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "kubectl patch nodedisruptionbudget "+name):
			t.Errorf("cordon of %s: %v, want 429 naming the way out", nodes[i], err)
		}
	}
	if got := unschedulable(t, env, nodes); admitted != 2 || len(got) != 2 {
		t.Fatalf("%d cordons admitted, %v cordoned, want 2 with 4 of 6 kept", admitted, got)
	}
	var free []string
	for _, n := range nodes {
		if !strings.Contains(strings.Join(unschedulable(t, env, nodes), ","), n) {
			free = append(free, n)
		}
	}
	// kubectl drain prints the refused cordon and goes on to evict the
	// node's pods (kubectl's choice, exit 0); the node stays in service,
	// so the pool keeps its capacity and the pods may land on it again.
	out, err := env.Kubectl(t, "drain", free[0], "--ignore-daemonsets", "--timeout=20s")
	if !strings.Contains(out, "NodeDisruptionBudget "+name+" keeps at least 4 of the 6 nodes") || slices.Contains(unschedulable(t, env, nodes), free[0]) {
		t.Errorf("kubectl drain at the floor: %v\n%s", err, out)
	}
	out, err = env.Kubectl(t, "taint", "node", free[0], "maintenance=now:NoSchedule")
	if err == nil || !strings.Contains(out, "tainting node "+free[0]) {
		t.Errorf("kubectl taint at the floor: %v\n%s", err, out)
	}
	// What is no departure passes at the floor: a label, a soft taint.
	if out, err := env.Kubectl(t, "label", "node", free[0], "rack=r1"); err != nil {
		t.Errorf("labelling a node at the floor: %v\n%s", err, out)
	}
	if out, err := env.Kubectl(t, "taint", "node", free[0], "soft=yes:PreferNoSchedule"); err != nil {
		t.Errorf("a PreferNoSchedule taint at the floor: %v\n%s", err, out)
	}
	// A node back in service makes room for the next departure.
	back := unschedulable(t, env, nodes)[0]
	if out, err := env.Kubectl(t, "uncordon", back); err != nil {
		t.Fatalf("uncordon: %v\n%s", err, out)
	}
	waitFor(t, "a cordon to pass once a node is back", 30*time.Second, func(context.Context) (bool, error) {
		return patch(env, free[1], `{"spec":{"unschedulable":true}}`) == nil, nil
	})
	// The refusal is an Event on the node and on the budget.
	waitFor(t, "a CordonDenied Event on a node of the pool", 30*time.Second, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=CordonDenied"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.HasPrefix(e.Regarding.Name, name+"-") && e.Regarding.Kind == "Node" {
				return true, nil
			}
		}
		return false, nil
	})
}

// A rate: one departure per hour; the second is refused with a Retry-After
// (429), and the status lists the departure.
func TestNodeBudgetRate(t *testing.T) {
	env := clustertest.Get(t)
	name := "rate"
	nodes := pool(t, env, name, 3)
	create(t, env, fmt.Sprintf("metadata: {name: %s}\nspec: {nodeSelector: {matchLabels: {pool: %s}}, rate: {count: 1, window: 1h}}", name, name))
	if err := env.Client.CoreV1().Nodes().Delete(context.Background(), nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatalf("first departure, a delete, within the rate: %v", err)
	}
	// Refused at once: an hour's Retry-After would have client-go (and
	// kubectl cordon) sleep it out; the message says when instead.
	start := time.Now()
	if err := patch(env, nodes[1], `{"spec":{"unschedulable":true}}`); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("second departure over the rate: %v, want 429", err)
	}
	// kubectl cordon prints the refusal (and exits 0: kubectl's choice).
	out, err := env.Kubectl(t, "cordon", nodes[1])
	// The wait is the window less the time since the first departure,
	// rounded to the second: a full hour when both came within half a second.
	if !strings.Contains(out, "lets 1 of its nodes leave service per 1h") ||
		!regexp.MustCompile(`node `+nodes[1]+` may go in (59m|1h0m0s)`).MatchString(out) || time.Since(start) > 20*time.Second {
		t.Fatalf("second departure over the rate, after %s: %v\n%s", time.Since(start), err, out)
	}
	// rampart status shows where the budget stands and who was refused.
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	st, err := exec.Command(rampart, "status", "--kubeconfig", env.Kubeconfig).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^rate\s+pool=rate\s+1 of 1 left in the last 1h\s+cordoning node/`+nodes[1]+` by `).Match(st) {
		t.Errorf("rampart status: %v\n%s", err, st)
	}
	u, err := env.Dynamic.Resource(budgets).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, _, _ := unstructured.NestedSlice(u.Object, "status", "disruptions")
	if len(ds) != 1 || ds[0].(map[string]any)["node"] != nodes[0] || ds[0].(map[string]any)["kind"] != "Delete" {
		t.Errorf("status.disruptions = %v, want the delete of %s", ds, nodes[0])
	}
}

// Do no harm: with the pool at its floor, the cluster still heals. A node
// that dies is marked NotReady and tainted by the node lifecycle
// controller (Rampart never sees those writes: the webhook's match
// conditions keep them away), and the dead node is deleted (it is out of
// service already: it costs the budget nothing). The cluster's health
// taints added by hand pass too, and so do deleting the budget.
func TestNodeBudgetNeverBlocksHealing(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	name := "heal"
	nodes := pool(t, env, name, 3)
	create(t, env, fmt.Sprintf("metadata: {name: %s}\nspec: {nodeSelector: {matchLabels: {pool: %s}}, minAvailable: 3}", name, name))
	if err := patch(env, nodes[2], `{"spec":{"unschedulable":true}}`); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("a cordon at the floor: %v, want refused", err)
	}
	// Its heartbeat stops: the node dies.
	if err := localcluster.SetNodeHeartbeat(ctx, env.Client, nodes[0], false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node lifecycle controller to taint the dead node", 4*time.Minute, func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodes[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == corev1.TaintNodeUnreachable || tn.Key == corev1.TaintNodeNotReady {
				return !localcluster.NodeReady(n), nil
			}
		}
		return false, nil
	})
	if err := env.Client.CoreV1().Nodes().Delete(ctx, nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting a dead node below the floor: %v", err)
	}
	// A health taint by hand (marking a node out of service for the
	// non-graceful shutdown of its pods) is the cluster healing too.
	if err := patch(env, nodes[1], `{"spec":{"taints":[{"key":"node.kubernetes.io/out-of-service","value":"nodeshutdown","effect":"NoExecute"}]}}`); err != nil {
		t.Errorf("the out-of-service taint below the floor: %v", err)
	}
	if err := env.Dynamic.Resource(budgets).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting the budget: %v", err)
	}
}

// Do no harm: a drain the floor allows goes through end to end, as
// kubectl does it (cordon, evict, wait for the pods to go), right after
// the budget is created, and its pods' replacements stay off the node.
func TestNodeBudgetLetsADrainWithinTheFloorThrough(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	name := "drain"
	nodes := pool(t, env, name, 3)
	ns := env.Namespace(t)
	app := map[string]string{"app": "drained"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "drained"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: app},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": nodes[0]},
			Containers:   []corev1.Container{{Name: "app", Image: "app"}}}}}}
	if _, err := env.Client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, ns, "app=drained", 2, time.Minute)
	create(t, env, fmt.Sprintf("metadata: {name: %s}\nspec: {nodeSelector: {matchLabels: {pool: %s}}, minAvailable: 2}", name, name))
	out, err := env.Kubectl(t, "drain", nodes[0], "--ignore-daemonsets", "--timeout=60s")
	if err != nil || !strings.Contains(out, "node/"+nodes[0]+" drained") {
		t.Fatalf("kubectl drain within the floor: %v\n%s", err, out)
	}
	if got := unschedulable(t, env, nodes); !slices.Equal(got, nodes[:1]) {
		t.Errorf("cordoned %v, want %v", got, nodes[:1])
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=drained"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == nodes[0] && p.DeletionTimestamp == nil {
			t.Errorf("pod %s still on the drained node", p.Name)
		}
	}
}

// Exact under faults: three manager replicas, a storm of cordons over a
// pool of nine with a floor of five, and a replica stopped mid-storm.
// Counted from the nodes themselves (the API server's state, not
// Rampart's answers): never more than four cordoned; and once the
// departures the stopped replica may have recorded without answering have
// aged out (InFlight), retries reach exactly four.
func TestNodeBudgetIsExactWhenAReplicaDies(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3})
	name := "storm"
	nodes := pool(t, env, name, 9)
	create(t, env, fmt.Sprintf("metadata: {name: %s}\nspec: {nodeSelector: {matchLabels: {pool: %s}}, minAvailable: 5}", name, name))
	var (
		wg                 sync.WaitGroup
		mu                 sync.Mutex
		throttled, refused int
	)
	for i, n := range nodes {
		if i == 3 {
			if err := env.StopComponent(localcluster.ManagerName(2)); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := patch(env, n, `{"spec":{"unschedulable":true}}`)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case apierrors.IsTooManyRequests(err):
				throttled++
			case err != nil:
				refused++ // the stopped replica's share: failed closed
			}
		}()
	}
	wg.Wait()
	t.Logf("storm: %d refused at the floor, %d failed closed (the stopped replica)", throttled, refused)
	if got := unschedulable(t, env, nodes); len(got) > 4 {
		t.Fatalf("%d cordoned in the storm (%v), past a floor of 5 of 9", len(got), got)
	}
	waitFor(t, "retried cordons to reach the floor", 4*time.Minute, func(context.Context) (bool, error) {
		for _, n := range nodes {
			_ = patch(env, n, `{"spec":{"unschedulable":true}}`)
		}
		got := unschedulable(t, env, nodes)
		if len(got) > 4 {
			t.Fatalf("%d cordoned (%v), past a floor of 5 of 9", len(got), got)
		}
		return len(got) == 4, nil
	})
}
