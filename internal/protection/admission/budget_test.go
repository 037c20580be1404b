package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

var budgetsGVR = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "podunavailablebudgets"}

// The PodUnavailableBudget API: the API server rejects malformed budgets.
func TestMalformedBudgetsAreRejected(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	budgets := env.Dynamic.Resource(budgetsGVR).Namespace(ns)
	create := func(spec string) error {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte("apiVersion: rampart.io/v1alpha1\nkind: PodUnavailableBudget\nmetadata: {generateName: b-}\nspec: "+spec), &u.Object); err != nil {
			t.Fatal(err)
		}
		_, err := budgets.Create(context.Background(), u, metav1.CreateOptions{})
		return err
	}
	for _, ok := range []string{`{selector: {matchLabels: {app: web}}, maxUnavailable: "25%"}`, `{targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, minAvailable: 2}`} {
		if err := create(ok); err != nil {
			t.Errorf("valid budget %s rejected: %v", ok, err)
		}
	}
	for spec, want := range map[string]string{
		`{maxUnavailable: 1}`: "set exactly one of selector and targetRef",
		`{selector: {}, targetRef: {apiVersion: apps/v1, kind: Deployment, name: w}, maxUnavailable: 1}`: "set exactly one of selector and targetRef",
		`{selector: {}, maxUnavailable: 1, minAvailable: 1}`:                                             "set exactly one of maxUnavailable and minAvailable",
		`{selector: {}, maxUnavailable: "125%"}`:                                                         "a percentage from 0% to 100%",
		`{selector: {}, maxUnavailable: -1}`:                                                             "a count of 0 or more",
		`{selector: {}, maxUnavailable: 1, protectOperations: [Restart]}`:                                `Unsupported value: "Restart"`,
	} {
		if err := create(spec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("budget %s: err = %v, want Invalid naming %q", spec, err, want)
		}
	}
}

// createBudget creates a budget from a YAML spec.
func createBudget(t testing.TB, env *clustertest.Env, ns, name, spec string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf("apiVersion: rampart.io/v1alpha1\nkind: PodUnavailableBudget\nmetadata: {name: %s}\nspec: %s", name, spec)), &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create budget %s: %v", name, err)
	}
}

func getBudget(t testing.TB, env *clustertest.Env, ns, name string) *v1alpha1.PodUnavailableBudget {
	t.Helper()
	u, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.PodUnavailableBudget{}
	raw, _ := u.MarshalJSON()
	if err := json.Unmarshal(raw, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitBudget waits until the budget's status satisfies ok.
func waitBudget(t testing.TB, env *clustertest.Env, ns, name string, timeout time.Duration, ok func(v1alpha1.PodUnavailableBudgetStatus) bool) v1alpha1.PodUnavailableBudgetStatus {
	t.Helper()
	var last v1alpha1.PodUnavailableBudgetStatus
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		b := getBudget(t, env, ns, name)
		last = b.Status
		return b.Status.ObservedGeneration == b.Generation && meta.IsStatusConditionTrue(b.Status.Conditions, "Ready") && ok(b.Status), nil
	})
	if err != nil {
		t.Fatalf("budget %s/%s: status never as expected; last %+v", ns, name, last)
	}
	return last
}

// createPods creates bare pods named prefix-0..n-1 with the labels, on
// node (empty: wherever the scheduler puts them).
func createPods(t testing.TB, env *clustertest.Env, ns, prefix string, n int, labels map[string]string, nodeSelector map[string]string) {
	t.Helper()
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}, NodeSelector: nodeSelector,
				TerminationGracePeriodSeconds: ptr.To(int64(0))},
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func evict(env *clustertest.Env, ns, pod string, dryRun bool) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}}
	if dryRun {
		ev.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	}
	return env.Client.CoreV1().Pods(ns).EvictV1(context.Background(), ev)
}

// A budget judges deletes, evictions and in-place updates of the pods it
// covers, whoever sends them; dry runs never consume it; a pod covered by
// two budgets needs both; a pod not Ready costs nothing unless the
// budget's unhealthyPodPolicy says otherwise.
func TestBudgetJudgesEveryDisruption(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	pods := env.Client.CoreV1().Pods(ns)
	web := map[string]string{"app": "web"}
	createPods(t, env, ns, "web", 4, web, nil)
	env.WaitPodsRunning(t, ns, "app=web", 4, time.Minute)
	// The budget comes after its pods.
	createBudget(t, env, ns, "web", `{selector: {matchLabels: {app: web}}, minAvailable: 3}`)
	waitBudget(t, env, ns, "web", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.TotalReplicas == 4 && s.CurrentAvailable == 4 && s.DesiredAvailable == 3 && s.UnavailableAllowed == 1
	})
	// Dry runs are judged and consume nothing.
	for range 3 {
		if err := pods.Delete(ctx, "web-0", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("dry-run delete: %v", err)
		}
		if err := evict(env, ns, "web-0", true); err != nil {
			t.Fatalf("dry-run eviction: %v", err)
		}
	}
	if s := getBudget(t, env, ns, "web").Status; s.UnavailableAllowed != 1 || len(s.Disruptions) != 0 {
		t.Fatalf("dry runs consumed the budget: %+v", s)
	}

	// One disruption is allowed; the next of any kind is refused with 429.
	if err := pods.Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("first delete: %v", err)
	}
	err := pods.Delete(ctx, "web-1", metav1.DeleteOptions{})
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), fmt.Sprintf("PodUnavailableBudget %s/web allows no more disruptions", ns)) ||
		!strings.Contains(err.Error(), "kubectl rampart pub status -n "+ns) {
		t.Fatalf("second delete: %v", err)
	}
	t.Logf("denial: %v", err)
	if err := evict(env, ns, "web-1", false); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "may not be evicted now") {
		t.Fatalf("eviction: %v", err)
	}
	p, err := pods.Get(ctx, "web-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Image = "web:2"
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "may not be updated in place now") {
		t.Fatalf("in-place image update: %v", err)
	}
	// What restarts nothing passes.
	if _, err := pods.Patch(ctx, "web-2", types.MergePatchType, []byte(`{"metadata":{"labels":{"note":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("label change: %v", err)
	}
	waitEvent(t, env, ns, "web-1", "DisruptionDenied")

	// The budget recovers once a new pod runs (bare pods: the budget's
	// total is the pods there are).
	createPods(t, env, ns, "web-new", 1, web, nil)
	env.WaitPodsRunning(t, ns, "app=web", 4, time.Minute)
	waitBudget(t, env, ns, "web", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.CurrentAvailable == 4 && s.UnavailableAllowed == 1 && len(s.Disruptions) == 0
	})

	// A second budget over the same pods that allows nothing: both must
	// agree, and the first gives back what it took.
	createBudget(t, env, ns, "strict", `{selector: {matchLabels: {app: web}}, minAvailable: 4, unhealthyPodPolicy: Never}`)
	waitBudget(t, env, ns, "strict", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.CurrentAvailable == 4 && s.UnavailableAllowed == 0
	})
	if err := pods.Delete(ctx, "web-1", metav1.DeleteOptions{}); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "strict") {
		t.Fatalf("delete under two budgets: %v", err)
	}
	if s := getBudget(t, env, ns, "web").Status; s.UnavailableAllowed != 1 || len(s.Disruptions) != 0 {
		t.Fatalf("budget web kept a disruption budget strict refused: %+v", s)
	}

	// A pod that is not Ready is judged like any other by a budget whose
	// unhealthyPodPolicy is Never: with nothing allowed, deleting it is
	// refused too, saying why. (Before unhealthyPodPolicy every budget
	// did this; the default, AlwaysAllow, now lets it go: below.)
	createPods(t, env, ns, "pending", 2, web, map[string]string{"no-such-node": "true"})
	waitBudget(t, env, ns, "strict", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.TotalReplicas == 6 && s.CurrentAvailable == 4 && s.UnavailableAllowed == 0
	})
	if err := pods.Delete(ctx, "pending-0", metav1.DeleteOptions{}); !apierrors.IsTooManyRequests(err) ||
		!strings.Contains(err.Error(), "the pod is unavailable (it is not Ready) and the budget's unhealthyPodPolicy is Never") {
		t.Fatalf("delete of a pod not Ready under an exhausted budget with unhealthyPodPolicy Never: %v", err)
	}
	// The default: a pod already unavailable costs nothing, at once after
	// the budget changes.
	if _, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Patch(ctx, "strict", types.MergePatchType,
		[]byte(`{"spec":{"unhealthyPodPolicy":"AlwaysAllow"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "pending-0", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete of a pod not Ready, unhealthyPodPolicy AlwaysAllow: %v", err)
	}
	if err := evict(env, ns, "pending-1", false); err != nil {
		t.Fatalf("eviction of a pod not Ready, unhealthyPodPolicy AlwaysAllow: %v", err)
	}
	// The eviction is recorded until its pod is seen going (carried out
	// by name after the answer, it may find the pod Ready by then); once
	// it is gone, budget web allows its one disruption again: unavailable
	// pods consumed nothing.
	for _, name := range []string{"strict", "web"} {
		s := getBudget(t, env, ns, name).Status
		if len(s.Disruptions) > 1 || (len(s.Disruptions) == 1 && s.DisruptionOps["pending-1"] != v1alpha1.DisruptEvict) {
			t.Fatalf("budget %s: unavailable pods recorded as more than the eviction of pending-1: %+v", name, s)
		}
	}
	waitBudget(t, env, ns, "web", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.UnavailableAllowed == 1 && len(s.Disruptions) == 0
	})
	// Pods outside every budget are never judged.
	createPods(t, env, ns, "other", 1, map[string]string{"app": "other"}, nil)
	if err := pods.Delete(ctx, "other-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitEvent(t testing.TB, env *clustertest.Env, ns, name, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on %s/%s", reason, ns, name)
	}
}

// Resize is judged only by budgets that list it, and deletes only by
// budgets that list Delete.
func TestBudgetJudgesResizeOnlyWhenAsked(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	pods := env.Client.CoreV1().Pods(ns)
	// rs-0 cannot be scheduled: a kwok node runs containers without the
	// resources status the API server wants before a resize, a pod with
	// no running container may be resized. It is not Ready, so judged
	// only by a budget whose unhealthyPodPolicy is Never (the default lets
	// an unavailable pod's disruption go at no cost).
	for i, sel := range []map[string]string{{"no-such-node": "true"}, nil} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("rs-", i), Labels: map[string]string{"app": "rs"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
			}}}, NodeSelector: sel, TerminationGracePeriodSeconds: ptr.To(int64(0))},
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createBudget(t, env, ns, "resize", `{selector: {matchLabels: {app: rs}}, minAvailable: 1, protectOperations: [Resize], unhealthyPodPolicy: Never}`)
	waitBudget(t, env, ns, "resize", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.TotalReplicas == 2 && s.CurrentAvailable == 1 && s.UnavailableAllowed == 0
	})
	resize := []byte(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"150m"}}}]}}`)
	_, err := pods.Patch(ctx, "rs-0", types.StrategicMergePatchType, resize, metav1.PatchOptions{}, "resize")
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "may not be resized now") {
		t.Fatalf("resize under a budget allowing nothing: %v", err)
	}
	if err := pods.Delete(ctx, "rs-1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete under a budget that judges resizes only: %v", err)
	}
}

// A disruption admitted by the budget and then refused by another webhook
// never happens; the budget gets it back within the disruption timeout
// (5 s in this package's cluster).
func TestBudgetConsumedByAFailedRequestComesBack(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	createPods(t, env, ns, "db", 3, map[string]string{"app": "db", "rampart.io/protection": "Always"}, nil)
	env.WaitPodsRunning(t, ns, "app=db", 3, time.Minute)
	createBudget(t, env, ns, "db", `{selector: {matchLabels: {app: db}}, maxUnavailable: 1}`)
	waitBudget(t, env, ns, "db", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool { return s.UnavailableAllowed == 1 })
	err := env.Client.CoreV1().Pods(ns).Delete(ctx, "db-0", metav1.DeleteOptions{})
	denied := time.Now()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "rampart.io/protection") {
		t.Fatalf("delete of a protected pod: %v", err)
	}
	s := getBudget(t, env, ns, "db").Status
	// The API server consults every validating webhook and waits for all.
	if _, took := s.Disruptions["db-0"]; !took {
		t.Fatalf("the budget did not record the disruption it admitted: %+v", s)
	}
	waitBudget(t, env, ns, "db", 20*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.UnavailableAllowed == 1 && len(s.Disruptions) == 0
	})
	back := time.Since(denied)
	t.Logf("budget returned %.1fs after the failed delete (timeout 5s)", back.Seconds())
	if back > 8*time.Second {
		t.Fatalf("budget came back after %v, want within the 5s timeout plus resync", back)
	}
}

// With three manager replicas and hundreds of concurrent deletes and
// evictions of one workload's pods, the pods disrupted never exceed what
// the budget allows. Replacement pods cannot be scheduled while the storm
// runs (their node selector matches no node), so the count is exact: it
// must equal unavailableAllowed, round after round.
func TestBudgetIsExactAcrossReplicas(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3})
	ctx := context.Background()
	ns := env.Namespace(t)
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	node := nodes.Items[0].Name
	pool := func(on bool) {
		patch := `{"metadata":{"labels":{"pool":null}}}`
		if on {
			patch = `{"metadata":{"labels":{"pool":"web"}}}`
		}
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const replicas, allowed = 40, 4
	pool(true)
	out, err := env.Kubectl(t, "create", "deployment", "web", "-n", ns, "--image=web:1", fmt.Sprint("--replicas=", replicas))
	if err != nil {
		t.Fatal(out)
	}
	if out, err := env.Kubectl(t, "patch", "deployment", "web", "-n", ns, "--type=merge",
		"-p", `{"spec":{"template":{"spec":{"nodeSelector":{"pool":"web"},"terminationGracePeriodSeconds":0}}}}`); err != nil {
		t.Fatal(out)
	}
	createBudget(t, env, ns, "web", fmt.Sprintf(`{targetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxUnavailable: %d}`, allowed))
	for round := range 3 {
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
		var mu sync.Mutex
		disrupted := map[string]bool{}
		denied, failed := 0, 0
		var wg sync.WaitGroup
		work := make(chan int)
		for range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					p := list.Items[i%len(list.Items)].Name
					var err error
					if i%2 == 0 {
						err = env.Client.CoreV1().Pods(ns).Delete(ctx, p, metav1.DeleteOptions{})
					} else {
						err = evict(env, ns, p, false)
					}
					mu.Lock()
					switch {
					case err == nil:
						disrupted[p] = true
					case apierrors.IsTooManyRequests(err):
						denied++
					case apierrors.IsNotFound(err):
						// already deleted by an admitted request
					default:
						failed++
						t.Logf("unexpected error: %v", err)
					}
					mu.Unlock()
				}
			}()
		}
		for i := range 300 {
			work <- i
		}
		close(work)
		wg.Wait()
		t.Logf("round %d: 300 concurrent disruptions (deletes and evictions) of %d pods: %d pods disrupted, %d requests denied, %d other errors",
			round, replicas, len(disrupted), denied, failed)
		if len(disrupted) > allowed {
			t.Fatalf("round %d: %d pods disrupted, the budget allows %d", round, len(disrupted), allowed)
		}
		if len(disrupted) < allowed && failed == 0 {
			t.Errorf("round %d: only %d pods disrupted, the budget allows %d", round, len(disrupted), allowed)
		}
	}
}

// A workload annotated rampart.io/generate-pub gets a budget it owns,
// sized from its annotations or its rollout strategy; it follows the
// annotations and goes with the workload. `rampart pub status` shows it.
func TestGeneratedBudget(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	if out, err := env.Kubectl(t, "create", "deployment", "web", "-n", ns, "--image=web:1", "--replicas=4"); err != nil {
		t.Fatal(out)
	}
	if out, err := env.Kubectl(t, "patch", "deployment", "web", "-n", ns, "--type=merge", "-p",
		`{"metadata":{"annotations":{"rampart.io/generate-pub":"true"}},"spec":{"strategy":{"rollingUpdate":{"maxUnavailable":2}}}}`); err != nil {
		t.Fatal(out)
	}
	waitGenerated := func(ok func(*v1alpha1.PodUnavailableBudget) bool) *v1alpha1.PodUnavailableBudget {
		t.Helper()
		var last *v1alpha1.PodUnavailableBudget
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			u, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Get(ctx, "web", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				last = nil
				return ok(nil), nil
			}
			if err != nil {
				return false, nil
			}
			last = &v1alpha1.PodUnavailableBudget{}
			raw, _ := u.MarshalJSON()
			_ = json.Unmarshal(raw, last)
			return ok(last), nil
		})
		if err != nil {
			t.Fatalf("generated budget never as expected; last %+v", last)
		}
		return last
	}
	b := waitGenerated(func(b *v1alpha1.PodUnavailableBudget) bool {
		return b != nil && b.Spec.MaxUnavailable != nil && b.Spec.MaxUnavailable.String() == "2" && b.Status.UnavailableAllowed == 2
	})
	if ref := metav1.GetControllerOf(b); ref == nil || ref.Kind != "Deployment" || ref.Name != "web" || b.Spec.TargetRef == nil || b.Spec.TargetRef.Name != "web" {
		t.Fatalf("generated budget not owned by or targeting the Deployment: %+v", b)
	}
	// Broken pods may go, as for any budget (the API server's default).
	if b.Spec.UnhealthyPodPolicy != v1alpha1.UnhealthyAlwaysAllow {
		t.Fatalf("generated budget's unhealthyPodPolicy %q, want AlwaysAllow", b.Spec.UnhealthyPodPolicy)
	}
	if out, err := env.Kubectl(t, "annotate", "deployment", "web", "-n", ns, "rampart.io/generate-pub-min-available=75%"); err != nil {
		t.Fatal(out)
	}
	waitGenerated(func(b *v1alpha1.PodUnavailableBudget) bool {
		return b != nil && b.Spec.MinAvailable != nil && b.Spec.MinAvailable.String() == "75%" && b.Spec.MaxUnavailable == nil && b.Status.UnavailableAllowed == 1
	})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rampart, "pub", "status", "--kubeconfig", env.Kubeconfig, "-n", ns).CombinedOutput()
	if err != nil {
		t.Fatalf("rampart pub status: %v\n%s", err, out)
	}
	if !regexp.MustCompile(ns + `\s+web\s+Deployment/web\s+4\s+4\s+3\s+1\s+0\s+True`).Match(out) {
		t.Fatalf("rampart pub status:\n%s", out)
	}
	if out, err := env.Kubectl(t, "annotate", "deployment", "web", "-n", ns, "rampart.io/generate-pub-"); err != nil {
		t.Fatal(out)
	}
	waitGenerated(func(b *v1alpha1.PodUnavailableBudget) bool { return b == nil })
	if out, err := env.Kubectl(t, "annotate", "deployment", "web", "-n", ns, "rampart.io/generate-pub=true"); err != nil {
		t.Fatal(out)
	}
	waitGenerated(func(b *v1alpha1.PodUnavailableBudget) bool { return b != nil })
	if err := env.Client.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGenerated(func(b *v1alpha1.PodUnavailableBudget) bool { return b == nil })
}
