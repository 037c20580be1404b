package admission_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// leader is the manager replica that leads (controller-runtime's
// leader_election_master_status gauge), -1 if none does yet.
func leader(t testing.TB, env *clustertest.Env, replicas int) int {
	t.Helper()
	for i := range replicas {
		if env.PID(localcluster.ManagerName(i)) == 0 {
			continue
		}
		body, err := env.ScrapeManagerMetrics(context.Background(), i)
		if err != nil {
			continue
		}
		if strings.Contains(body, `leader_election_master_status{name="rampart-manager"} 1`) {
			return i
		}
	}
	return -1
}

func waitLeader(t testing.TB, env *clustertest.Env, replicas int) int {
	t.Helper()
	l := -1
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		l = leader(t, env, replicas)
		return l >= 0, nil
	}); err != nil {
		t.Fatal("no manager replica leads")
	}
	return l
}

// Issue 24: a pod created while every manager was down is judged at once
// when the managers come back, before any leader is elected, and still
// once one is: the budget webhook reaches every pod of a namespace holding
// budgets, nothing needs writing on the pod first.
func TestBudgetHoldsForPodsCreatedWhileManagersWereDown(t *testing.T) {
	const managers = 3
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: managers,
		ManagerArgs: []string{"--budget-disruption-timeout=5s"}})
	ctx := context.Background()
	ns := env.Namespace(t)
	pods := env.Client.CoreV1().Pods(ns)
	if out, err := env.Kubectl(t, "create", "deployment", "web", "-n", ns, "--image=web:1", "--replicas=4"); err != nil {
		t.Fatal(out)
	}
	createBudget(t, env, ns, "web", `{targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, minAvailable: "100%"}`)
	env.WaitPodsRunning(t, ns, "app=web", 4, 2*time.Minute)
	waitBudget(t, env, ns, "web", time.Minute, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.TotalReplicas == 4 && s.CurrentAvailable == 4 && s.UnavailableAllowed == 0
	})
	old := map[string]bool{}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		old[p.Name] = true
	}

	for i := range managers {
		if err := env.KillComponent(localcluster.ManagerName(i)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := env.Kubectl(t, "scale", "deployment", "web", "-n", ns, "--replicas=6"); err != nil {
		t.Fatal(out)
	}
	var fresh []string
	for _, p := range env.WaitPodsRunning(t, ns, "app=web", 6, 2*time.Minute) {
		if !old[p.Name] {
			fresh = append(fresh, p.Name)
		}
	}
	if len(fresh) != 2 {
		t.Fatalf("new pods %v, want 2", fresh)
	}
	for i := range managers {
		if err := env.StartManager(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	// At once, before any leader is elected (the dead leader's lease has
	// not expired yet): the budget allows nothing, and the new pods are
	// judged like the others.
	err = pods.Delete(ctx, fresh[0], metav1.DeleteOptions{})
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "PodUnavailableBudget "+ns+"/web allows no more disruptions") {
		t.Fatalf("delete of new pod %s under a budget allowing nothing: %v", fresh[0], err)
	}
	if err := evict(env, ns, fresh[1], false); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction of new pod %s under a budget allowing nothing: %v", fresh[1], err)
	}
	// And once a leader runs the controllers, which changes nothing here.
	waitLeader(t, env, managers)
	for _, p := range fresh {
		if err := pods.Delete(ctx, p, metav1.DeleteOptions{}); !apierrors.IsTooManyRequests(err) {
			t.Fatalf("delete of new pod %s under a budget allowing nothing, with a leader: %v", p, err)
		}
	}
}

// Issue 24: three manager replicas, a 10-replica Deployment under a budget
// of maxUnavailable 2, 30 workers deleting and evicting its pods for two
// seconds while the leading replica is SIGKILLed, round after round.
// Replacement pods cannot be scheduled during a storm (their node selector
// matches no node), so every disruption shows: the pods gone never exceed
// 2 in any round. They run between rounds, created partly while a replica
// was dead, and are judged all the same.
// RAMPART_FAILOVER_ROUNDS sets the rounds (2 here; hack/budgets-in-force-loop.sh runs 5).
func TestBudgetHoldsAcrossManagerFailover(t *testing.T) {
	const managers, replicas, allowed = 3, 10, 2
	rounds := 2
	if n, err := strconv.Atoi(os.Getenv("RAMPART_FAILOVER_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: managers,
		ManagerArgs: []string{"--budget-disruption-timeout=5s"}})
	ctx := context.Background()
	ns := env.Namespace(t)
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	pool := func(on bool) {
		patch := `{"metadata":{"labels":{"pool":null}}}`
		if on {
			patch = `{"metadata":{"labels":{"pool":"web"}}}`
		}
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, nodes.Items[0].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pool(true)
	if out, err := env.Kubectl(t, "create", "deployment", "web", "-n", ns, "--image=web:1", fmt.Sprint("--replicas=", replicas)); err != nil {
		t.Fatal(out)
	}
	if out, err := env.Kubectl(t, "patch", "deployment", "web", "-n", ns, "--type=merge",
		"-p", `{"spec":{"template":{"spec":{"nodeSelector":{"pool":"web"},"terminationGracePeriodSeconds":0}}}}`); err != nil {
		t.Fatal(out)
	}
	createBudget(t, env, ns, "web", fmt.Sprintf(`{targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxUnavailable: %d}`, allowed))
	worst := 0
	for round := range rounds {
		pool(true)
		env.WaitPodsRunning(t, ns, "app=web", replicas, 2*time.Minute)
		waitBudget(t, env, ns, "web", time.Minute, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
			return s.TotalReplicas == replicas && s.CurrentAvailable == replicas && s.UnavailableAllowed == allowed && len(s.Disruptions) == 0
		})
		pool(false)
		list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		victim := waitLeader(t, env, managers)
		var mu sync.Mutex
		disrupted := map[string]bool{}
		var sent, denied, failed atomic.Int64
		stop := time.Now().Add(2 * time.Second)
		var wg sync.WaitGroup
		for w := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; time.Now().Before(stop); i += 30 {
					p := list.Items[rand.IntN(len(list.Items))].Name
					var err error
					if i%2 == 0 {
						err = env.Client.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{})
					} else {
						err = evict(env, ns, p, false)
					}
					sent.Add(1)
					switch {
					case err == nil:
						mu.Lock()
						disrupted[p] = true
						mu.Unlock()
					case apierrors.IsTooManyRequests(err):
						denied.Add(1)
					case apierrors.IsNotFound(err):
					default:
						// The killed replica's requests fail closed.
						failed.Add(1)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		if err := env.KillComponent(localcluster.ManagerName(victim)); err != nil {
			t.Fatal(err)
		}
		killedAt := sent.Load()
		wg.Wait()
		worst = max(worst, len(disrupted))
		t.Logf("round %d: %d requests (leader, replica %d, SIGKILLed after %d), %d pods disrupted, %d denied, %d failed of %d pods",
			round, sent.Load(), victim, killedAt, len(disrupted), denied.Load(), failed.Load(), len(list.Items))
		if len(disrupted) > allowed {
			t.Fatalf("round %d: %d pods disrupted, the budget allows %d", round, len(disrupted), allowed)
		}
		if err := env.StartManager(ctx, victim); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds, a leader SIGKILLed in each: at most %d pods disrupted in a round (budget: %d)", rounds, worst, allowed)
}

// Issue 20: a budget holds from the moment `create` returns. Ten running
// bare pods, a budget of minAvailable 8 created over them, and at once —
// no sleep, no wait for Ready — ten concurrent deletes and evictions: at
// most 2 go through, every time. The budget's admission waits until the
// API server calls the budget webhooks for every pod of the namespace;
// until the status controller has computed the budget, it allows nothing.
func TestBudgetHoldsFromCreation(t *testing.T) {
	env := clustertest.Get(t)
	for i := range inForceIterations() {
		budgetHoldsAtOnce(t, env, i)
	}
}

// The same with three manager replicas: the budget's admission may be
// served by one replica while the disruptions go to the others, whose
// caches have not seen the budget yet.
func TestBudgetHoldsFromCreationWithSeveralReplicas(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3})
	for i := range inForceIterations() {
		budgetHoldsAtOnce(t, env, i)
		disrupted, took := generatedActAtOnce(t, env)
		t.Logf("iteration %d: annotation accepted in %v; %d of 10 pods disrupted by 10 concurrent deletes and evictions sent at once (budget allows 2)",
			i, took.Round(time.Millisecond), disrupted)
		if disrupted > 2 {
			t.Fatalf("iteration %d: %d pods disrupted right after the workload asked for a budget of maxUnavailable 2", i, disrupted)
		}
		disrupted, took = budgetChangeActAtOnce(t, env)
		t.Logf("iteration %d: budget tightened in %v; %d of 10 pods disrupted by 10 concurrent deletes and evictions sent at once (budget allows 2)",
			i, took.Round(time.Millisecond), disrupted)
		if disrupted > 2 {
			t.Fatalf("iteration %d: %d pods disrupted right after the budget was tightened to minAvailable 8", i, disrupted)
		}
	}
	// Each replica knew its index current through the change marks: a
	// read, no write and no list (budget.MarksName).
	if reads := budgetIndexReads(t, env, 3); reads["marks"] == 0 || reads["fence"] != 0 {
		t.Fatalf("disruptions' reads of the budget index by way: %v; want them through the marks, none through the fence", reads)
	} else {
		t.Logf("disruptions' reads of the budget index by way: %v", reads)
	}
}

// A budget tightened (minAvailable 0 to 8, a new generation) holds from the
// moment the API server accepts the change, on every replica: the objects
// webhook marks the change before it is stored.
func budgetChangeActAtOnce(t testing.TB, env *clustertest.Env) (int, time.Duration) {
	t.Helper()
	ns := env.Namespace(t)
	createPods(t, env, ns, "web", 10, map[string]string{"app": "web"}, nil)
	env.WaitPodsRunning(t, ns, "app=web", 10, 2*time.Minute)
	createBudget(t, env, ns, "web", `{selector: {matchLabels: {app: web}}, minAvailable: 0}`)
	waitBudget(t, env, ns, "web", time.Minute, func(s v1alpha1.PodUnavailableBudgetStatus) bool { return s.UnavailableAllowed == 10 })
	start := time.Now()
	if _, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Patch(context.Background(), "web", types.MergePatchType,
		[]byte(`{"spec":{"minAvailable":8}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("tightening the budget: %v", err)
	}
	took := time.Since(start)
	return disruptAtOnce(t, env, ns), took
}

// The same through the budget fence (--budget-change-marks=false
// --budget-fence-above=1: every namespace holding a budget is judged after
// a fence write, not a read of its change marks or a live list of its
// budgets): the replica judging the disruptions has filed the
// new budget before it decides, or the fence makes it wait until it has.
func TestBudgetHoldsFromCreationThroughTheFence(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3, ManagerArgs: []string{"--budget-fence-above=1", "--budget-change-marks=false"}})
	for i := range inForceIterations() {
		budgetHoldsAtOnce(t, env, i)
	}
	if n := fenceWrites(t, env, 3); n == 0 {
		t.Fatal("no disruption went through the fence (rampart_budget_fence_writes_total{outcome=\"ok\"} is 0 on every replica)")
	} else {
		t.Logf("fence writes: %v", n)
	}
}

// fenceWrites sums rampart_budget_fence_writes_total{outcome="ok"} over
// the manager replicas.
func fenceWrites(t *testing.T, env *clustertest.Env, replicas int) float64 {
	t.Helper()
	return sumManagerMetrics(t, env, replicas, `rampart_budget_fence_writes_total{outcome="ok"}`)[""]
}

// budgetIndexReads sums rampart_budget_index_reads_total over the manager
// replicas, by way.
func budgetIndexReads(t *testing.T, env *clustertest.Env, replicas int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for labels, v := range sumManagerMetrics(t, env, replicas, "rampart_budget_index_reads_total") {
		out[strings.TrimSuffix(strings.TrimPrefix(labels, `{way="`), `"}`)] += v
	}
	return out
}

// sumManagerMetrics sums the samples of a metric (a name, or a name with
// its labels) over the manager replicas, by the rest of the sample's name
// (its labels, if not given).
func sumManagerMetrics(t *testing.T, env *clustertest.Env, replicas int, metric string) map[string]float64 {
	t.Helper()
	sum := map[string]float64{}
	for i := range replicas {
		text, err := env.ScrapeManagerMetrics(context.Background(), i)
		if err != nil {
			t.Fatalf("scraping manager %d: %v", i, err)
		}
		for _, line := range strings.Split(text, "\n") {
			name, v, ok := strings.Cut(line, " ")
			rest, found := strings.CutPrefix(name, metric)
			if !ok || !found || (rest != "" && rest[0] != '{') {
				continue
			}
			f, _ := strconv.ParseFloat(v, 64)
			sum[rest] += f
		}
	}
	return sum
}

// budgetHoldsAtOnce fails the test if a budget created over 10 pods
// (minAvailable 8) lets more than 2 of 10 disruptions sent at once through.
func budgetHoldsAtOnce(t *testing.T, env *clustertest.Env, iteration int) {
	t.Helper()
	disrupted, took := budgetActAtOnce(t, env)
	t.Logf("iteration %d: budget created in %v; %d of 10 pods disrupted by 10 concurrent deletes and evictions sent at once (budget allows 2)",
		iteration, took.Round(time.Millisecond), disrupted)
	if disrupted > 2 {
		t.Fatalf("iteration %d: %d pods disrupted right after the budget was created, it allows 2", iteration, disrupted)
	}
}

// budgetActAtOnce creates 10 running pods in a new namespace, a budget of
// minAvailable 8 over them, and at once 10 concurrent disruptions; it
// returns how many pods were disrupted and how long the create took.
func budgetActAtOnce(t testing.TB, env *clustertest.Env) (int, time.Duration) {
	t.Helper()
	ns := env.Namespace(t)
	createPods(t, env, ns, "web", 10, map[string]string{"app": "web"}, nil)
	env.WaitPodsRunning(t, ns, "app=web", 10, 2*time.Minute)
	start := time.Now()
	createBudget(t, env, ns, "web", `{selector: {matchLabels: {app: web}}, minAvailable: 8}`)
	took := time.Since(start)
	return disruptAtOnce(t, env, ns), took
}

// disruptAtOnce sends 10 concurrent deletes and evictions of pods web-0 to
// web-9 of ns, deletes ns, and says how many pods were disrupted.
func disruptAtOnce(t testing.TB, env *clustertest.Env, ns string) int {
	t.Helper()
	ctx := context.Background()
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := fmt.Sprint("web-", i)
			var err error
			if i%2 == 0 {
				err = env.Client.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{})
			} else {
				err = evict(env, ns, p, false)
			}
			if err == nil {
				n.Add(1)
			} else if !apierrors.IsTooManyRequests(err) {
				t.Logf("%s: %v", p, err)
			}
		}()
	}
	wg.Wait()
	_ = env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	return int(n.Load())
}

// Issue 20: a generated budget holds from the moment the annotation that
// asks for it is accepted. A running 10-replica Deployment is annotated
// rampart.io/generate-pub (maxUnavailable 2), and at once ten concurrent
// deletes and evictions of its pods: at most 2 go through.
func TestGeneratedBudgetHoldsFromAnnotation(t *testing.T) {
	env := clustertest.Get(t)
	for i := range inForceIterations() {
		disrupted, took := generatedActAtOnce(t, env)
		t.Logf("iteration %d: annotation accepted in %v; %d of 10 pods disrupted by 10 concurrent deletes and evictions sent at once (budget allows 2)",
			i, took.Round(time.Millisecond), disrupted)
		if disrupted > 2 {
			t.Fatalf("iteration %d: %d pods disrupted right after the workload asked for a budget of maxUnavailable 2", i, disrupted)
		}
	}
}

// generatedActAtOnce annotates a running 10-replica Deployment for a
// generated budget of maxUnavailable 2 and at once disrupts each of its
// pods concurrently; it returns how many were disrupted and how long the
// annotation took.
func generatedActAtOnce(t testing.TB, env *clustertest.Env) (int, time.Duration) {
	t.Helper()
	ctx := context.Background()
	ns := env.Namespace(t)
	// Replacements must not become Ready during the storm, or the budget
	// rightly allows more: the pods run on nodes labelled for this
	// namespace, and the label goes before the storm.
	pool := schedulable(t, env, ns)
	pool(true)
	defer pool(false)
	web := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(10)), Selector: &metav1.LabelSelector{MatchLabels: web},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: web}, Spec: corev1.PodSpec{
			Containers:   []corev1.Container{{Name: "app", Image: "web:1"}},
			NodeSelector: map[string]string{ns: "pool"}, TerminationGracePeriodSeconds: ptr.To(int64(0))}}}}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list := env.WaitPodsRunning(t, ns, "app=web", 10, 2*time.Minute)
	pool(false)
	patch := []byte(`{"metadata":{"annotations":{"rampart.io/generate-pub":"true","rampart.io/generate-pub-max-unavailable":"2"}}}`)
	start := time.Now()
	if _, err := env.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var n atomic.Int64
	var wg sync.WaitGroup
	for i, p := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				err = env.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{})
			} else {
				err = evict(env, ns, p.Name, false)
			}
			if err == nil {
				n.Add(1)
			} else if !apierrors.IsTooManyRequests(err) {
				t.Logf("%s: %v", p.Name, err)
			}
		}()
	}
	wg.Wait()
	_ = env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	return int(n.Load()), took
}

// schedulable returns a switch of label key=pool on every node: pods
// selecting it run while it is on, and replacements stay Pending once it
// is off.
func schedulable(t testing.TB, env *clustertest.Env, key string) func(on bool) {
	return func(on bool) {
		t.Helper()
		nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patch := `{"metadata":{"labels":{"` + key + `":null}}}`
		if on {
			patch = `{"metadata":{"labels":{"` + key + `":"pool"}}}`
		}
		for _, n := range nodes.Items {
			if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// inForceIterations is how many times the creation tests repeat: 3 here,
// RAMPART_INFORCE_ITERATIONS in hack/budgets-in-force-loop.sh.
func inForceIterations() int {
	if n, err := strconv.Atoi(os.Getenv("RAMPART_INFORCE_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return 3
}
