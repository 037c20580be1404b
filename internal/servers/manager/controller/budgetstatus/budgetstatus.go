// Package budgetstatus keeps each PodUnavailableBudget's status current
// from the cluster view, and files budgets in the view's index that the
// budget webhook reads.
package budgetstatus

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
	"github.com/rampart-io/rampart/internal/protection/clusterview"
)

// An eviction of a pod the cluster view has not cached yet reads the pod
// (the budget webhook, internal/protection/admission).
// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=*,resources=*/scale,verbs=get

// blocksAll marks the budgets that can never allow a disruption (set by
// the leader, which computes the status).
var blocksAll = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "rampart_budget_blocks_all_disruptions",
	Help: "1 for a PodUnavailableBudget that can never allow a healthy pod's disruption (maxUnavailable 0, or minAvailable at or above its pods): drains and rollouts of its pods never finish.",
}, []string{"namespace", "budget"})

func init() { metrics.Registry.MustRegister(blocksAll) }

// BlocksAllCondition is the status condition of a budget that can never
// allow a disruption (kubectl describe, kubectl rampart pub status).
const BlocksAllCondition = "BlocksAllDisruptions"

// queueSource is a controller source fed from outside the cluster's
// watches (the view's pod events): it adds to the controller's queue once
// the controller runs (on the leader). Events before that are dropped: a
// new leader reconciles every budget anyway.
type queueSource struct {
	mu sync.Mutex
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (s *queueSource) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = q
	return nil
}

func (s *queueSource) add(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q != nil {
		s.q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
}

// SetupWithManager files budgets in the view's index on every replica
// (the webhooks read it) and runs the reconciler on the leader. reach is
// called when a namespace gains its first budget or loses its last: that
// changes what the webhooks reach.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, reach func()) error {
	view := r.View
	inf, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.PodUnavailableBudget{})
	if err != nil {
		return err
	}
	index := view.Index()
	statusQ := &queueSource{}
	// A namespace gaining its first budget or losing its last changes
	// what the webhooks reach; status writes (one per disruption) do not.
	changed := func(ns string, file func() bool) bool {
		had := index.HasBudgets(ns)
		if !file() {
			return false
		}
		if index.HasBudgets(ns) != had {
			reach()
		}
		return true
	}
	set := func(o any) {
		if b, ok := o.(*v1alpha1.PodUnavailableBudget); ok {
			if changed(b.Namespace, func() bool { return index.SetBudget(b) }) {
				// The pods it covers changed (a targetRef budget covers
				// pods only once its status names their selector): compute
				// its status again from the index as filed now, or it keeps
				// what it counted before the pods were filed under it
				// until one of them changes.
				statusQ.add(b.Namespace, b.Name)
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, o any) { set(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if b, ok := o.(*v1alpha1.PodUnavailableBudget); ok {
				changed(b.Namespace, func() bool {
					index.DeleteBudget(budget.Key{Namespace: b.Namespace, Name: b.Name})
					return true
				})
			}
		},
	}); err != nil {
		return err
	}
	view.OnBudgetPods(func(_, _ string, keys []budget.Key) {
		for _, k := range keys {
			statusQ.add(k.Namespace, k.Name)
		}
	})
	if r.Now == nil {
		r.Now = time.Now
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("podunavailablebudget-status").
		// The fence is written on disruptions and is no budget: no status.
		For(&v1alpha1.PodUnavailableBudget{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return !index.IsOwn(o.GetNamespace(), o.GetName())
		}))).
		WatchesRawSource(statusQ).
		Complete(r); err != nil {
		return err
	}
	return nil
}

// Reconciler keeps each budget's status current from the view: the
// pods it covers, how many are available, and the disruptions admitted
// and not yet observed (returned once observed, or after timeout).
type Reconciler struct {
	Client  client.Client
	View    *clusterview.Budgets
	Scales  rampartadmission.Scales
	Timeout time.Duration
	Now     func() time.Time
	// Recorder sends the Warning Event of a budget that can never allow a
	// disruption; nil sends none.
	Recorder events.EventRecorder
}

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &v1alpha1.PodUnavailableBudget{}
	if err := r.Client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			blocksAll.DeleteLabelValues(req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	before := b.Status.DeepCopy()
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Computed", ObservedGeneration: b.Generation,
		Message: "the budget judges disruptions of the pods it covers"}
	total, err := r.total(ctx, b)
	var st v1alpha1.PodUnavailableBudgetStatus
	if apierrors.IsNotFound(err) {
		// The target is gone: its pods are going with it, and the budget
		// covers nothing until a workload of that name comes back.
		b.Status = v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: b.Generation, Conditions: b.Status.Conditions}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
			Reason: "TargetNotFound", ObservedGeneration: b.Generation, Message: err.Error()})
		if equality.Semantic.DeepEqual(before, &b.Status) {
			return reconcile.Result{RequeueAfter: time.Minute}, nil
		}
		return reconcile.Result{RequeueAfter: time.Minute}, r.Client.Status().Update(ctx, b)
	}
	switch {
	case err == nil && budget.Grouped(b.Spec):
		pods := r.podsOf(b)
		st, err = budget.ComputeGrouped(b, pods, budget.GroupTotals(b.Spec, pods, func(c string) (string, int32, bool) {
			return r.View.ControllerReplicas(b.Namespace, c)
		}, b.Status.GroupStatus), r.Now(), r.Timeout)
	case err == nil:
		st, err = budget.Compute(b, r.podsOf(b), total, r.Now(), r.Timeout)
	}
	if err != nil {
		// Nothing is admitted on a budget that cannot be computed.
		st = *b.Status.DeepCopy()
		st.ObservedGeneration = b.Generation
		st.UnavailableAllowed = 0
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Invalid", err.Error()
	}
	var requeue time.Duration
	if cond.Status == metav1.ConditionTrue && !r.evictionsJudged(ctx, b.Namespace) {
		// Disruptions are judged once the webhooks reach the namespace.
		cond.Status, cond.Reason = metav1.ConditionFalse, "Registering"
		cond.Message = "waiting for the eviction webhook to reach namespace " + b.Namespace
		requeue = time.Second
	}
	st.Conditions = b.Status.Conditions
	b.Status = st
	meta.SetStatusCondition(&b.Status.Conditions, cond)
	r.markBlocksAll(b, cond.Status == metav1.ConditionTrue)
	if next := budget.NextExpiry(b.Status, r.Timeout); !next.IsZero() {
		if d := max(time.Until(next)+100*time.Millisecond, 100*time.Millisecond); requeue == 0 || d < requeue {
			requeue = d
		}
	}
	if equality.Semantic.DeepEqual(before, &b.Status) {
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
	if err := r.Client.Status().Update(ctx, b); err != nil {
		if apierrors.IsConflict(err) {
			// A webhook recorded a disruption meanwhile: compute again.
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// markBlocksAll flags a budget that can never allow a disruption: a
// condition, a gauge and, when it starts, a Warning Event. computed is
// false while its status is not (an invalid budget is flagged as such).
func (r *Reconciler) markBlocksAll(b *v1alpha1.PodUnavailableBudget, computed bool) {
	blocks, why := budget.BlocksAll(b.Spec, b.Status)
	if !computed || !blocks {
		meta.RemoveStatusCondition(&b.Status.Conditions, BlocksAllCondition)
		blocksAll.DeleteLabelValues(b.Namespace, b.Name)
		return
	}
	blocksAll.WithLabelValues(b.Namespace, b.Name).Set(1)
	msg := fmt.Sprintf("the budget allows no disruption at any time (%s): a drain or a rollout of its pods never finishes; "+
		"loosen it (maxUnavailable 1 or more, or minAvailable below the pods) unless that is intended", why)
	if c := meta.FindStatusCondition(b.Status.Conditions, BlocksAllCondition); (c == nil || c.Message != msg) && r.Recorder != nil {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "BudgetBlocksAllDisruptions", "Compute", "%s", msg)
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: BlocksAllCondition, Status: metav1.ConditionTrue,
		Reason: "NoDisruptionAllowed", ObservedGeneration: b.Generation, Message: msg})
}

// evictionsJudged says whether the registered webhook configuration judges
// evictions and disruptions of every pod in ns (every replica's copy, when
// there are several).
func (r *Reconciler) evictionsJudged(ctx context.Context, ns string) bool {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg); err != nil {
		return false
	}
	found := map[string]bool{}
	for _, w := range cfg.Webhooks {
		base := rampartadmission.BaseName(w.Name)
		if base != pub.EvictionWebhookName && base != pub.WebhookName {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil || !sel.Matches(labels.Set{corev1.LabelMetadataName: ns}) {
			return false
		}
		found[base] = true
	}
	return len(found) == 2
}

func (r *Reconciler) podsOf(b *v1alpha1.PodUnavailableBudget) []budget.Pod {
	pods, _ := r.View.Index().Pods(budget.Key{Namespace: b.Namespace, Name: b.Name})
	return pods
}

// total is the number of pods the budget should have: the target's
// replicas, or for a selector, the replicas of the workloads controlling
// its pods (as a PodDisruptionBudget counts them), plus pods without one.
// For a targetRef it also resolves the target's selector into the status.
func (r *Reconciler) total(ctx context.Context, b *v1alpha1.PodUnavailableBudget) (int32, error) {
	if t := b.Spec.TargetRef; t != nil {
		_, n, cached := r.View.ControllerReplicas(b.Namespace, t.Kind+"/"+t.Name)
		if cached && b.Status.Selector != "" && b.Status.ObservedGeneration == b.Generation {
			return n, nil
		}
		selector, replicas, err := r.Scales.Scale(ctx, b.Namespace, t)
		if err != nil {
			return 0, err
		}
		// Every replica's index files the budget once this status is
		// written; the next reconcile counts its pods.
		b.Status.Selector = selector
		return replicas, nil
	}
	var total int32
	seen := map[string]bool{}
	for _, p := range r.podsOf(b) {
		if p.Controller == "" {
			total++
			continue
		}
		top, n, ok := r.View.ControllerReplicas(b.Namespace, p.Controller)
		switch {
		case !ok:
			total++
		case !seen[top]:
			seen[top] = true
			total += n
		}
	}
	return total, nil
}
