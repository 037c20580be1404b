package drill

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// concurrentDisruptions: several disruptions that are each fine alone hit
// one workload at once — its rolling update, a node drain, and pods
// deleted by hand — and together take it far below the availability it
// needs (ByteDance and OpenKruise reports: deletes bypass the
// PodDisruptionBudget, which guards evictions only). Protected, the
// workload carries a generated PodUnavailableBudget, which judges all
// three. Available pods are sampled continuously; the loss is how far the
// lowest sample fell below the floor.
var concurrentDisruptions = Drill{
	Name: "concurrent-disruptions",
	Incident: "a rolling update, a node drain and pods deleted by hand hit one 20-replica workload at once; " +
		"deletes bypass the PodDisruptionBudget (ByteDance and OpenKruise reports)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		const replicas, floor, poolSize, handDeletes = 20, 15, 3, 6
		ns := t.Prefix + "-shop"
		loss := Loss{Total: floor, Unit: "pods below the floor of 15 available, at worst"}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		pool, err := t.pool(ctx, poolSize)
		if err != nil {
			return loss, err
		}
		defer t.releasePool(pool)
		d := deployment("checkout", replicas, nil)
		d.Spec.Template.Spec.NodeSelector = map[string]string{"rampart.io/drill-pool": t.Prefix}
		// Each pod needs 3 s to start: replacements are not instant.
		d.Spec.Template.Annotations = map[string]string{localcluster.PodReadyDelayAnnotation: "3s"}
		if t.Protected {
			d.Annotations = map[string]string{v1alpha1.AnnotationGeneratePUB: "true"} // 25%, from the rollout strategy
		}
		if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return loss, err
		}
		if err := t.waitReady(ctx, ns, "app=checkout", replicas); err != nil {
			return loss, err
		}
		if t.Protected {
			if err := t.waitBudget(ctx, ns, "checkout", replicas-floor); err != nil {
				return loss, err
			}
		}
		pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=checkout"})
		if err != nil {
			return loss, err
		}
		drained := pool[0]
		var byHand []string
		for _, p := range pods.Items {
			if p.Spec.NodeName != drained && len(byHand) < handDeletes {
				byHand = append(byHand, p.Name)
			}
		}

		// Watch available pods through the incident: every change is seen,
		// not only those a periodic sample happens to catch.
		sampleCtx, stopSampling := context.WithCancel(ctx)
		lowest, err := t.watchLowestReady(sampleCtx, ns, "app=checkout")
		if err != nil {
			stopSampling()
			return loss, err
		}

		// The incident: all three at once, each retrying what is refused
		// for up to a minute, as kubectl drain and a determined human do.
		deadline := time.Now().Add(time.Minute)
		var denied atomic.Value
		retry := func(f func() error) error {
			for {
				err := f()
				switch {
				case err == nil || apierrors.IsNotFound(err):
					return nil // done, or the pod went another way
				case !apierrors.IsTooManyRequests(err):
					return err
				case time.Now().After(deadline):
					return nil // gave up: the pod stays
				}
				denied.Store(err.Error())
				time.Sleep(500 * time.Millisecond)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		wg.Go(func() {
			patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/app:2"}]}}}}`)
			_, err := t.Client.AppsV1().Deployments(ns).Patch(ctx, "checkout", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			errs <- err
		})
		wg.Go(func() {
			errs <- t.drain(ctx, ns, drained, retry)
		})
		for _, name := range byHand {
			wg.Go(func() {
				errs <- retry(func() error { return t.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}) })
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				stopSampling()
				return loss, err
			}
		}
		// Until the rollout is over and the workload whole again.
		var last string
		err = poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			dep, err := t.Client.AppsV1().Deployments(ns).Get(ctx, "checkout", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = fmt.Sprintf("%d replicas, %d updated, %d available", dep.Status.Replicas, dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas)
			return dep.Status.UpdatedReplicas == replicas && dep.Status.AvailableReplicas == replicas && dep.Status.Replicas == replicas, nil
		})
		low := lowest()
		stopSampling()
		if err != nil {
			return loss, fmt.Errorf("the workload did not recover (%s; lowest %d available): %w", last, low, err)
		}
		loss.Lost = max(floor-low, 0)
		loss.Denied, _ = denied.Load().(string)
		return loss, nil
	},
}

// pool labels n Ready nodes for the drill's workload.
func (t Target) pool(ctx context.Context, n int) ([]string, error) {
	nodes, err := t.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: int64(n)})
	if err != nil {
		return nil, err
	}
	if len(nodes.Items) < n {
		return nil, fmt.Errorf("the drill needs %d nodes, the cluster has %d", n, len(nodes.Items))
	}
	var out []string
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"rampart.io/drill-pool":%q}}}`, t.Prefix))
	for _, node := range nodes.Items[:n] {
		if _, err := t.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return nil, err
		}
		out = append(out, node.Name)
	}
	return out, nil
}

func (t Target) releasePool(nodes []string) {
	patch := []byte(`{"metadata":{"labels":{"rampart.io/drill-pool":null}},"spec":{"unschedulable":null}}`)
	for _, n := range nodes {
		_, _ = t.Client.CoreV1().Nodes().Patch(context.Background(), n, types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// drain cordons a node and evicts the drill's pods on it, as kubectl drain
// does: an eviction refused with 429 is retried.
func (t Target) drain(ctx context.Context, ns, node string, retry func(func() error) error) error {
	if _, err := t.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pods.Items))
	for i, p := range pods.Items {
		wg.Go(func() {
			errs[i] = retry(func() error {
				return t.Client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns}})
			})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// watchLowestReady watches the pods matching selector in ns until ctx ends
// and returns a function giving the lowest number of them Ready (and not
// going away) seen since the watch started.
func (t Target) watchLowestReady(ctx context.Context, ns, selector string) (func() int, error) {
	var mu sync.Mutex
	ready := map[string]bool{}
	lowest := 0
	count := func() int {
		n := 0
		for _, r := range ready {
			if r {
				n++
			}
		}
		return n
	}
	measuring := false
	err := t.watchPods(ctx, ns, selector, func(p *corev1.Pod, gone bool) {
		mu.Lock()
		defer mu.Unlock()
		ready[p.Name] = !gone && p.DeletionTimestamp == nil && podReady(p)
		if n := count(); measuring && n < lowest {
			lowest = n
		}
	})
	if err != nil {
		return nil, err
	}
	// From the whole list on, not while it is being read.
	mu.Lock()
	lowest, measuring = count(), true
	mu.Unlock()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return lowest
	}, nil
}

// watchPods calls record for every pod matching selector in ns as it is
// listed, changes or goes (gone), from an informer that runs until ctx
// ends; it returns once the informer has synced.
func (t Target) watchPods(ctx context.Context, ns, selector string, record func(p *corev1.Pod, gone bool)) error {
	f := informers.NewSharedInformerFactoryWithOptions(t.Client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Core().V1().Pods().Informer()
	handle := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			record(p, gone)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { handle(o, false) },
		UpdateFunc: func(_, o any) { handle(o, false) },
		DeleteFunc: func(o any) { handle(o, true) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watching pods %s in %s: not synced", selector, ns)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyPods counts pods that are Ready and not going away.
func (t Target) readyPods(ctx context.Context, ns, selector string) (int, error) {
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if podReady(&p) {
			n++
		}
	}
	return n, nil
}

func (t Target) waitReady(ctx context.Context, ns, selector string, want int) error {
	var have int
	err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		have, err = t.readyPods(ctx, ns, selector)
		return err == nil && have == want, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d pods %s Ready in %s: %w", have, want, selector, ns, err)
	}
	return nil
}

// waitBudget waits until the generated budget allows what it should.
func (t Target) waitBudget(ctx context.Context, ns, name string, allowed int64) error {
	gvr := windowsGVR.GroupVersion().WithResource("podunavailablebudgets")
	return poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		u, err := t.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		status, _ := u.Object["status"].(map[string]any)
		n, _ := status["unavailableAllowed"].(int64)
		conds, _ := status["conditions"].([]any)
		ready := false
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				ready = true // evictions are judged in its namespace too
			}
		}
		return ready && n == allowed, nil
	})
}
