package admission_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// BenchmarkEvictionWithManyBudgets measures a dry-run eviction of one pod
// through the real API server, in a namespace with n other budgets:
// Rampart's PodUnavailableBudgets (10 and 10,000) and native
// PodDisruptionBudgets (10 and 8,000, the count kubernetes#79697 reported);
// or (groups=n) in a namespace with one budget grouped by shard over n
// groups (one running pod each; kwok nodes enough for them). Dry runs are judged in full and consume nothing, so every iteration
// measures the same decision. Run:
//
//	go test -run '^$' -bench EvictionWithManyBudgets -benchtime 300x ./internal/protection/admission/
//
// RAMPART_BENCH_BUDGETS picks the cases, e.g. "rampart=10,rampart=50000";
// RAMPART_BENCH_FENCE_ABOVE sets the manager's --budget-fence-above (1:
// every case through the fence); RAMPART_BENCH_BACKGROUND_WRITES=N writes
// N times a second while it measures; RAMPART_BENCH_MANAGER_ARGS adds the
// manager's flags (e.g. --budget-change-marks=false). ready-s is how long the last budget's
// status took to allow the disruption after the creates ended.
func BenchmarkEvictionWithManyBudgets(b *testing.B) {
	type benchCase struct {
		kind string
		n    int
	}
	cases := []benchCase{{"rampart", 10}, {"rampart", 10000}, {"native", 10}, {"native", 8000}}
	if v := os.Getenv("RAMPART_BENCH_BUDGETS"); v != "" {
		cases = nil
		for _, c := range strings.Split(v, ",") {
			kind, n, _ := strings.Cut(c, "=")
			count, err := strconv.Atoi(n)
			if (kind != "rampart" && kind != "native" && kind != "groups") || err != nil || count < 1 {
				b.Fatalf("RAMPART_BENCH_BUDGETS: %q is not rampart=N, native=N or groups=N", c)
			}
			cases = append(cases, benchCase{kind, count})
		}
	}
	var args []string
	if v := os.Getenv("RAMPART_BENCH_FENCE_ABOVE"); v != "" {
		args = []string{"--budget-fence-above=" + v}
	}
	// RAMPART_BENCH_MANAGER_ARGS adds flags of the manager (space-separated).
	args = append(args, strings.Fields(os.Getenv("RAMPART_BENCH_MANAGER_ARGS"))...)
	// RAMPART_BENCH_PROFILE=PREFIX takes a 20 s CPU profile of the manager
	// during each case's evictions into PREFIX-CASE.pprof (give -benchtime
	// enough evictions to last that long).
	profile := os.Getenv("RAMPART_BENCH_PROFILE")
	if profile != "" {
		args = append(args, "--profiling")
	}
	// A group's pods run (kwok), or the group counts as disrupted: 250
	// pods fit on a node.
	nodes := 1
	for _, c := range cases {
		if c.kind == "groups" {
			nodes = max(nodes, c.n/200+1)
		}
	}
	env := clustertest.Start(b, localcluster.Options{Nodes: nodes, ManagerArgs: args})
	for _, c := range cases {
		name := fmt.Sprintf("%s-budgets=%d", c.kind, c.n)
		if c.kind == "groups" {
			name = fmt.Sprintf("rampart-groups=%d", c.n)
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			ns := env.Namespace(b)
			target := map[string]string{"app": "target"}
			if c.kind == "groups" {
				target["shard"] = "target"
			}
			createPods(b, env, ns, "target", 2, target, nil)
			env.WaitPodsRunning(b, ns, "app=target", 2, time.Minute)
			others := make([]string, c.n-1)
			for i := range others {
				others[i] = fmt.Sprint("other-", i)
			}
			create := func(name, app string) error {
				if c.kind == "native" {
					pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1)),
							Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
					_, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
					return err
				}
				u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rampart.io/v1alpha1", "kind": "PodUnavailableBudget",
					"metadata": map[string]any{"name": name},
					"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": app}}, "minAvailable": int64(1)}}}
				_, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
				return err
			}
			if c.kind == "groups" {
				// One budget over the target's group and n-1 others of one
				// running pod each, grouped by shard.
				create = func(name, app string) error {
					if name == "target" {
						u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "rampart.io/v1alpha1", "kind": "PodUnavailableBudget",
							"metadata": map[string]any{"name": name},
							"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "target"}},
								"groupBy": map[string]any{"labelKey": "shard"}, "minAvailable": int64(1)}}}
						_, err := env.Dynamic.Resource(budgetsGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
						return err
					}
					p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "target", "shard": name}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}}}
					_, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
					return err
				}
			}
			began := time.Now()
			if err := parallelDo(others, func(name string) error { return create(name, name) }); err != nil {
				b.Fatal(err)
			}
			createRate := float64(len(others)) / time.Since(began).Seconds()
			if err := create("target", "target"); err != nil {
				b.Fatal(err)
			}
			var running time.Duration // ReportMetric now would not last: b.ResetTimer deletes it
			if c.kind == "groups" {
				// A group whose pod is not running yet is disrupted, and
				// while more are than the status lists (1,000) every
				// disruption is refused (fail closed): with thousands of
				// pods the scheduler and kwok take minutes. Ready is
				// counted from when they all run.
				began := time.Now()
				env.WaitPodsRunning(b, ns, "app=target", c.n+1, 30*time.Minute)
				running = time.Since(began)
			}
			// Wait until the target's budget allows the disruption (its pods
			// have no controller: minAvailable, as PodDisruptionBudgets need).
			created := time.Now()
			if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
				if c.kind == "native" {
					pdb, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "target", metav1.GetOptions{})
					return err == nil && pdb.Status.DisruptionsAllowed == 1, nil
				}
				if c.kind == "groups" {
					// Its groups' status is bounded: ask as a drain would
					// (allowed once the others' pods run, or few enough of
					// them do not that the status lists them all).
					return evict(env, ns, "target-0", true) == nil, nil
				}
				return getBudget(b, env, ns, "target").Status.UnavailableAllowed == 1, nil
			}); err != nil {
				b.Fatal("the target's budget never allowed a disruption")
			}
			ready := time.Since(created)
			if c.kind == "groups" {
				// Measured once the manager has counted every group's pod.
				waitBudget(b, env, ns, "target", 5*time.Minute, func(st v1alpha1.PodUnavailableBudgetStatus) bool {
					return st.CurrentAvailable == int32(c.n+1)
				})
			}
			evict := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "target-0", Namespace: ns},
				DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}}
			// The budget webhook's own time (controller-runtime's histogram
			// of the handler), apart from the API server's: after any
			// write, the eviction's own list of PodDisruptionBudgets waits
			// for the watch cache to catch up with etcd, up to the 100 ms
			// of its progress requests (consistent reads from cache).
			webhook := func() (sum, count float64) {
				if c.kind == "native" {
					return 0, 0
				}
				text, err := env.ScrapeManagerMetrics(ctx, 0)
				if err != nil {
					b.Fatal(err)
				}
				for _, line := range strings.Split(text, "\n") {
					if v, ok := strings.CutPrefix(line, `controller_runtime_webhook_latency_seconds_sum{webhook="/validate/budgets"} `); ok {
						sum, _ = strconv.ParseFloat(v, 64)
					}
					if v, ok := strings.CutPrefix(line, `controller_runtime_webhook_latency_seconds_count{webhook="/validate/budgets"} `); ok {
						count, _ = strconv.ParseFloat(v, 64)
					}
				}
				return sum, count
			}
			sum0, count0 := webhook()
			stopWrites := backgroundWrites(b, env, ns)
			profiled := func() {}
			if profile != "" {
				profiled = profileManager(b, env, profile+"-"+name+".pprof")
			}
			var lat []time.Duration
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				if err := env.Client.CoreV1().Pods(ns).EvictV1(ctx, evict); err != nil {
					b.Fatalf("dry-run eviction: %v", err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			stopWrites()
			profiled()
			reportPercentiles(b, lat)
			if sum1, count1 := webhook(); count1 > count0 {
				b.ReportMetric((sum1-sum0)/(count1-count0)*1e6, "webhook-mean-us")
			}
			b.ReportMetric(ready.Seconds(), "ready-s")
			if running > 0 {
				b.ReportMetric(running.Seconds(), "pods-running-s")
			}
			b.ReportMetric(createRate, "creates-per-s")
			if c.kind != "native" {
				// The manager's memory with this case's budgets filed (the
				// previous case's namespace is deleted, its budgets gone
				// from the index; Go may hold on to the freed heap).
				if text, err := env.ScrapeManagerMetrics(ctx, 0); err == nil {
					for _, line := range strings.Split(text, "\n") {
						if v, ok := strings.CutPrefix(line, "process_resident_memory_bytes "); ok {
							f, _ := strconv.ParseFloat(v, 64)
							b.ReportMetric(f/(1<<20), "manager-rss-mib")
						}
					}
				}
			}
			if c.kind == "rampart" {
				// What the budget webhook reads live on each disruption in a
				// namespace of fewer than --budget-fence-above budgets (see
				// Budgets.covering): its budgets, metadata only.
				md := metadata.NewForConfigOrDie(env.Config)
				var list []time.Duration
				for range 20 {
					start := time.Now()
					if _, err := md.Resource(budgetsGVR).Namespace(ns).List(ctx, metav1.ListOptions{}); err != nil {
						b.Fatal(err)
					}
					list = append(list, time.Since(start))
				}
				slices.Sort(list)
				b.ReportMetric(float64(list[len(list)/2].Microseconds()), "metadata-list-p50-us")
			}
			// Leave the API server as it was for the next case.
			_ = env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		})
	}
}

// backgroundWrites patches a ConfigMap of ns RAMPART_BENCH_BACKGROUND_WRITES
// times a second until stopped, as a cluster's lease renewals and events
// write all the time (none if unset): every write moves etcd's revision.
func backgroundWrites(b *testing.B, env *clustertest.Env, ns string) (stop func()) {
	rate, _ := strconv.Atoi(os.Getenv("RAMPART_BENCH_BACKGROUND_WRITES"))
	if rate <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "background", Namespace: ns}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			patch := fmt.Sprintf(`{"data":{"n":"%d"}}`, i)
			_, _ = env.Client.CoreV1().ConfigMaps(ns).Patch(ctx, "background", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		}
	}()
	return func() { cancel(); <-done }
}

func ptrTo[T any](v T) *T { return &v }

func parallelDo(names []string, f func(string) error) error {
	work := make(chan string)
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			var first error
			for n := range work {
				if err := f(n); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	var first error
	for range 32 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// reportPercentiles reports p50 and p99 of the measured latencies.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}
