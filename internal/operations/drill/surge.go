package drill

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/quota"
)

// surgeUsual is the drill's usual pod count at full scale.
const surgeUsual = 200

// podCreationSurge: a namespace's workloads suddenly ask for 3× their
// usual pods; the cluster autoscaler brought up 900 nodes and
// kube-apiserver's latency and errors rose until it ran out of memory
// (Pinterest, first outage of 2020). Protected, the namespace has the
// ResourceQuota and LimitRange `rampart quota plan` sizes from its use
// (plus 20%), applied before the surge: the surge is capped at the quota.
var podCreationSurge = Drill{
	Name:     "pod-creation-surge",
	Incident: "a namespace's workloads suddenly ask for 3x their usual pods: a Deployment scaled up and a burst of Jobs (Pinterest report, first outage of 2020)",
	Run:      runSurge,
}

func runSurge(ctx context.Context, t Target) (Loss, error) {
	usual := max(surgeUsual/t.Scale, 20)
	ns := t.Prefix + "-surge"
	loss := Loss{Total: 2 * usual, Unit: "surge pods at once"}
	if err := t.namespace(ctx, ns, nil); err != nil {
		return loss, err
	}
	defer t.cleanupNamespace(ns)
	web := deployment("web", int32(usual), nil)
	web.Spec.Template.Spec.Containers[0].Resources = podRequests()
	if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		return loss, err
	}
	if err := t.waitRunning(ctx, ns, "app=web", usual); err != nil {
		return loss, err
	}
	measured := map[string]float64{"usual_pods": float64(usual), "surge_pods_asked": float64(2 * usual)}
	if t.Protected {
		// What `rampart quota plan --apply` does, from the use now.
		md, err := metadata.NewForConfig(t.Config)
		if err != nil {
			return loss, err
		}
		obs, err := quota.Observe(ctx, t.Client, md, ns)
		if err != nil {
			return loss, err
		}
		plan := quota.PlanFor(obs, quota.DefaultMargin)
		if err := quota.Apply(ctx, t.Client, plan); err != nil {
			return loss, err
		}
		hard := plan.Quota.Spec.Hard[quota.Pods]
		measured["quota_pods"] = float64(hard.Value())
		// The quota allows its headroom over the usual pods, and a
		// tenth of its limit more: Kubernetes' quota can be overshot
		// during a surge (see quota_overshoot_pods below).
		loss.Bound = int(hard.Value())*11/10 - usual
		// The quota controller computes the namespace's use before the
		// API server enforces the quota.
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			q, err := t.Client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			used, ok := q.Status.Used[quota.Pods]
			return ok && used.Value() == int64(usual), nil
		}); err != nil {
			return loss, fmt.Errorf("the quota's use was never computed: %w", err)
		}
	}

	var apiserver int
	if t.Local != nil {
		apiserver = t.Local.PID(localcluster.APIServerName(0))
		measured["apiserver_calm_rss_mib"] = mib(rssBytes(apiserver))
	}
	surgeCtx, stopWatching := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var peakRSS, peakPods atomic.Int64
	var latencies []time.Duration
	// The pods the namespace holds at once (not finished, not going):
	// what a quota caps, and what loads the scheduler, the kubelets and
	// the API server's watchers.
	wg.Go(func() {
		for surgeCtx.Err() == nil {
			if n, err := t.livePods(surgeCtx, ns); err == nil {
				peakPods.Store(max(peakPods.Load(), int64(n)))
			}
			sleep(surgeCtx, 200*time.Millisecond)
		}
	})
	wg.Go(func() {
		for surgeCtx.Err() == nil {
			if apiserver != 0 {
				peakRSS.Store(max(peakRSS.Load(), rssBytes(apiserver)))
			}
			start := time.Now()
			if _, err := t.Client.CoreV1().Pods(ns).List(surgeCtx, metav1.ListOptions{Limit: 1}); err == nil {
				latencies = append(latencies, time.Since(start))
			}
			sleep(surgeCtx, 100*time.Millisecond)
		}
	})

	// The pods before the surge, to tell the surge's own from them.
	before, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		stopWatching()
		wg.Wait()
		return loss, err
	}
	usualPods := map[types.UID]bool{}
	for _, p := range before.Items {
		usualPods[p.UID] = true
	}

	// The surge: the Deployment to twice its size, and as many Jobs (one
	// pod each) as its usual pods, at once.
	began := time.Now()
	if _, err := t.Client.AppsV1().Deployments(ns).Patch(ctx, "web", "application/merge-patch+json",
		fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, 2*usual), metav1.PatchOptions{}); err != nil {
		stopWatching()
		wg.Wait()
		return loss, err
	}
	names := make([]string, usual)
	for i := range names {
		names[i] = fmt.Sprintf("batch-%04d", i)
	}
	var refused atomic.Int32
	var refusal atomic.Value
	err = parallel(ctx, names, func(ctx context.Context, name string) error {
		_, err := t.Client.BatchV1().Jobs(ns).Create(ctx, surgeJob(name), metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			refused.Add(1)
			refusal.Store(err.Error())
			return nil
		}
		return err
	})
	if err != nil {
		stopWatching()
		wg.Wait()
		return loss, err
	}
	// The controllers have caught up once no pod of the namespace waits to
	// be scheduled or started and the pods made since the surge stay the
	// same for two seconds; they were behind until the first such moment.
	created, pending := -1, 0
	var caughtUp time.Time
	err = poll(ctx, settle, func(ctx context.Context) (bool, error) {
		n, p, err := t.surgePods(ctx, ns, usualPods)
		if err != nil {
			return false, err
		}
		if p > 0 || n != created {
			created, pending, caughtUp = n, p, time.Time{}
			return false, nil
		}
		if caughtUp.IsZero() {
			caughtUp = time.Now()
		}
		return time.Since(caughtUp) >= 2*time.Second, nil
	})
	stopWatching()
	wg.Wait()
	if err != nil {
		return loss, fmt.Errorf("the controllers had not caught up %s after the surge (%d pods pending): %w", settle, pending, err)
	}
	behind := caughtUp.Sub(began)
	if n, err := t.livePods(ctx, ns); err == nil {
		peakPods.Store(max(peakPods.Load(), int64(n)))
	}
	loss.Lost = min(int(peakPods.Load())-usual, 2*usual)
	if d, ok := refusal.Load().(string); ok {
		loss.Denied = d
	}
	measured["pods_created"] = float64(created)
	measured["peak_pods"] = float64(peakPods.Load())
	if q, ok := measured["quota_pods"]; ok {
		// Kubernetes' quota can be overshot during a surge: its
		// controller recounts the namespace's pods from an informer that
		// may not have seen the newest ones yet, and admission trusts the
		// lower count (kubernetes/kubernetes#123434). Measured, not hidden.
		measured["quota_overshoot_pods"] = max(float64(peakPods.Load())-q, 0)
	}
	measured["jobs_refused"] = float64(refused.Load())
	measured["controllers_behind_s"] = behind.Seconds()
	measured["probe_list_p99_ms"] = ms(businessFigures{latencies: latencies}.quantile(0.99))
	measured["probe_list_p50_ms"] = ms(businessFigures{latencies: latencies}.quantile(0.50))
	if apiserver != 0 {
		measured["apiserver_peak_rss_mib"] = mib(peakRSS.Load())
	}
	loss.Measured = measured
	return loss, nil
}

// podRequests are a small service's requests and limits.
func podRequests() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
}

// surgeJob is a one-pod batch Job.
func surgeJob(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "batch"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "task", Image: "registry.example/task:1", Resources: podRequests()}},
				},
			},
		},
	}
}

// livePods counts the pods of ns that are neither finished nor going.
func (t Target) livePods(ctx context.Context, ns string) (int, error) {
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n, nil
}

// surgePods counts the pods of ns the surge made (not in usual), and the
// pods of ns still pending.
func (t Target) surgePods(ctx context.Context, ns string, usual map[types.UID]bool) (created, pending int, err error) {
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodPending {
			pending++
		}
		if !usual[p.UID] {
			created++
		}
	}
	return created, pending, nil
}
