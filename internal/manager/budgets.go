package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/budget"
	"github.com/rampart-io/rampart/internal/clusterview"
)

// +kubebuilder:rbac:groups=rampart.io,resources=podunavailablebudgets,verbs=create;update;patch;delete
// An eviction of a pod the cluster view has not cached yet reads the pod.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get
// +kubebuilder:rbac:groups=*,resources=*/scale,verbs=get

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

// setupBudgets files budgets in the view's index on every replica (the
// webhooks read it) and runs the budget controllers on the leader: status
// and generated budgets.
func setupBudgets(ctx context.Context, mgr ctrl.Manager, view *clusterview.Budgets, reg *registrar, scales rampartadmission.Scales, timeout time.Duration, recorder events.EventRecorder) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.PodUnavailableBudget{})
	if err != nil {
		return err
	}
	index := view.Index()
	statusQ := &queueSource{}
	// A namespace gaining its first budget or losing its last changes
	// what the webhooks reach; status writes (one per disruption) do not.
	changed := func(ns string, file func() bool) {
		had := index.HasBudgets(ns)
		if file() && index.HasBudgets(ns) != had {
			reg.poke()
		}
	}
	set := func(o any) {
		if b, ok := o.(*v1alpha1.PodUnavailableBudget); ok {
			changed(b.Namespace, func() bool { return index.SetBudget(b) })
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
	status := &budgetStatus{client: mgr.GetClient(), view: view, scales: scales, timeout: timeout, now: time.Now}
	if err := ctrl.NewControllerManagedBy(mgr).Named("podunavailablebudget-status").
		For(&v1alpha1.PodUnavailableBudget{}).
		WatchesRawSource(statusQ).
		Complete(status); err != nil {
		return err
	}
	gen := &generatedBudgets{client: mgr.GetClient(), reader: mgr.GetAPIReader(), recorder: recorder}
	for _, w := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		if err := ctrl.NewControllerManagedBy(mgr).Named("generated-budgets-"+strings.ToLower(kindOf(w))).
			For(w, builder.OnlyMetadata).
			Owns(&v1alpha1.PodUnavailableBudget{}).
			// Budgets generated at a workload's creation have no owner yet.
			Watches(&v1alpha1.PodUnavailableBudget{}, handler.EnqueueRequestsFromMapFunc(unownedGeneratedFor(kindOf(w)))).
			Complete(gen.forKind(w)); err != nil {
			return err
		}
	}
	return nil
}

func kindOf(w client.Object) string { return fmt.Sprintf("%T", w)[len("*v1."):] }

// unownedGeneratedFor maps a budget generated for a workload of kind, not owned
// yet, to that workload.
func unownedGeneratedFor(kind string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		k, name, _ := strings.Cut(o.GetAnnotations()[rampartadmission.AnnotationGeneratedFor], "/")
		if k != kind || metav1.GetControllerOf(o) != nil {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
}

// budgetStatus keeps each budget's status current from the view: the
// pods it covers, how many are available, and the disruptions admitted
// and not yet observed (returned once observed, or after timeout).
type budgetStatus struct {
	client  client.Client
	view    *clusterview.Budgets
	scales  rampartadmission.Scales
	timeout time.Duration
	now     func() time.Time
}

func (r *budgetStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &v1alpha1.PodUnavailableBudget{}
	if err := r.client.Get(ctx, req.NamespacedName, b); err != nil {
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
		return reconcile.Result{RequeueAfter: time.Minute}, r.client.Status().Update(ctx, b)
	}
	if err == nil {
		st, err = budget.Compute(b, r.podsOf(b), total, r.now(), r.timeout)
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
	if next := budget.NextExpiry(b.Status, r.timeout); !next.IsZero() {
		if d := max(time.Until(next)+100*time.Millisecond, 100*time.Millisecond); requeue == 0 || d < requeue {
			requeue = d
		}
	}
	if equality.Semantic.DeepEqual(before, &b.Status) {
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
	if err := r.client.Status().Update(ctx, b); err != nil {
		if apierrors.IsConflict(err) {
			// A webhook recorded a disruption meanwhile: compute again.
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// evictionsJudged says whether the registered webhook configuration judges
// evictions and disruptions of every pod in ns (every replica's copy, when
// there are several).
func (r *budgetStatus) evictionsJudged(ctx context.Context, ns string) bool {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg); err != nil {
		return false
	}
	found := map[string]bool{}
	for _, w := range cfg.Webhooks {
		base := rampartadmission.BaseName(w.Name)
		if base != rampartadmission.EvictionWebhookName && base != rampartadmission.BudgetsWebhookName {
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

func (r *budgetStatus) podsOf(b *v1alpha1.PodUnavailableBudget) []budget.Pod {
	pods, _ := r.view.Index().Pods(budget.Key{Namespace: b.Namespace, Name: b.Name})
	return pods
}

// total is the number of pods the budget should have: the target's
// replicas, or for a selector, the replicas of the workloads controlling
// its pods (as a PodDisruptionBudget counts them), plus pods without one.
// For a targetRef it also resolves the target's selector into the status.
func (r *budgetStatus) total(ctx context.Context, b *v1alpha1.PodUnavailableBudget) (int32, error) {
	if t := b.Spec.TargetRef; t != nil {
		_, n, cached := r.view.ControllerReplicas(b.Namespace, t.Kind+"/"+t.Name)
		if cached && b.Status.Selector != "" && b.Status.ObservedGeneration == b.Generation {
			return n, nil
		}
		selector, replicas, err := r.scales.Scale(ctx, b.Namespace, t)
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
		top, n, ok := r.view.ControllerReplicas(b.Namespace, p.Controller)
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

// generatedGrace is how long a generated budget stays after its
// workload's annotation seems gone (see Reconcile).
const generatedGrace = 10 * time.Second

// orphanGrace is how long a budget generated at a workload's creation
// waits for its workload (the admission creates the budget before the
// workload is stored) before it is deleted as an orphan.
const orphanGrace = time.Minute

// adoptable is a budget generated for kind/name before the workload had a
// UID: no owner yet.
func adoptable(b *v1alpha1.PodUnavailableBudget, kind, name string) bool {
	return metav1.GetControllerOf(b) == nil && b.Annotations[rampartadmission.AnnotationGeneratedFor] == kind+"/"+name
}

// deleteOrphan deletes a budget generated for a workload whose creation
// was admitted but never stored (another webhook refused it).
func (g *generatedFor) deleteOrphan(ctx context.Context, req reconcile.Request, kind string) (reconcile.Result, error) {
	b := &v1alpha1.PodUnavailableBudget{}
	if err := g.client.Get(ctx, req.NamespacedName, b); err != nil || !adoptable(b, kind, req.Name) {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if wait := orphanGrace - time.Since(b.CreationTimestamp.Time); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	// The cache may lag: only a live read says the workload never came.
	w := g.kind.DeepCopyObject().(client.Object)
	if err := g.reader.Get(ctx, req.NamespacedName, w); !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, client.IgnoreNotFound(g.client.Delete(ctx, b, client.Preconditions{UID: &b.UID}))
}

// generatedBudgets makes a PodUnavailableBudget for each workload
// annotated rampart.io/generate-pub: "true", owned by the workload (the
// garbage collector deletes it with the workload), and removes it when the
// annotation goes.
type generatedBudgets struct {
	client   client.Client
	reader   client.Reader
	recorder events.EventRecorder
}

type generatedFor struct {
	*generatedBudgets
	kind client.Object
}

func (g *generatedBudgets) forKind(obj client.Object) reconcile.Reconciler {
	return &generatedFor{generatedBudgets: g, kind: obj}
}

func (g *generatedFor) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// Every workload's changes reach here: read its metadata from the
	// cache, and the whole object only when it asks for a budget.
	gvk, err := apiutil.GVKForObject(g.kind, g.client.Scheme())
	if err != nil {
		return reconcile.Result{}, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	if err := g.client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			return g.deleteOrphan(ctx, req, gvk.Kind)
		}
		return reconcile.Result{}, err
	}
	kind := gvk.Kind
	var w client.Object = m
	var rolling *intstr.IntOrString
	if m.Annotations[v1alpha1.AnnotationGeneratePUB] == "true" && m.DeletionTimestamp == nil {
		w = g.kind.DeepCopyObject().(client.Object)
		if err := g.reader.Get(ctx, req.NamespacedName, w); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		switch o := w.(type) {
		case *appsv1.Deployment:
			if ru := o.Spec.Strategy.RollingUpdate; ru != nil {
				rolling = ru.MaxUnavailable
			}
		case *appsv1.StatefulSet:
			if ru := o.Spec.UpdateStrategy.RollingUpdate; ru != nil {
				rolling = ru.MaxUnavailable
			}
		}
	}
	existing := &v1alpha1.PodUnavailableBudget{}
	err = g.client.Get(ctx, req.NamespacedName, existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	found := err == nil
	ours := found && (metav1.IsControlledBy(existing, w) || adoptable(existing, kind, req.Name))
	if w.GetAnnotations()[v1alpha1.AnnotationGeneratePUB] != "true" || w.GetDeletionTimestamp() != nil {
		if !ours {
			return reconcile.Result{}, nil
		}
		// The request that asks for a budget creates it while it is being
		// admitted, before the workload's new annotations are stored: a
		// budget that young may belong to a change not seen yet.
		if wait := generatedGrace - time.Since(existing.CreationTimestamp.Time); wait > 0 && w.GetDeletionTimestamp() == nil {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		if w.GetDeletionTimestamp() == nil {
			// The cache may lag: only the stored workload says the
			// annotation is gone.
			live := g.kind.DeepCopyObject().(client.Object)
			if err := g.reader.Get(ctx, req.NamespacedName, live); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			} else if err == nil && live.GetAnnotations()[v1alpha1.AnnotationGeneratePUB] == "true" && live.GetDeletionTimestamp() == nil {
				return reconcile.Result{Requeue: true}, nil
			}
		}
		return reconcile.Result{}, client.IgnoreNotFound(g.client.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}))
	}
	if found && !ours {
		g.recorder.Eventf(w, nil, corev1.EventTypeWarning, "BudgetNotGenerated", "Generate",
			"PodUnavailableBudget %s/%s exists and is not owned by this %s; rename or delete it to let Rampart generate one",
			req.Namespace, req.Name, kind)
		return reconcile.Result{}, nil
	}
	maxU, minA, err := budget.GeneratedSize(w.GetAnnotations(), rolling)
	if err != nil {
		g.recorder.Eventf(w, nil, corev1.EventTypeWarning, "BudgetNotGenerated", "Generate", "%v", err)
		return reconcile.Result{}, nil
	}
	pub := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
	_, err = controllerutil.CreateOrUpdate(ctx, g.client, pub, func() error {
		if pub.Labels == nil {
			pub.Labels = map[string]string{}
		}
		pub.Labels["app.kubernetes.io/managed-by"] = "rampart"
		pub.Spec.TargetRef = &v1alpha1.TargetReference{APIVersion: "apps/v1", Kind: kind, Name: req.Name}
		pub.Spec.Selector = nil
		pub.Spec.MaxUnavailable, pub.Spec.MinAvailable = maxU, minA
		return controllerutil.SetControllerReference(w, pub, g.client.Scheme(), controllerutil.WithBlockOwnerDeletion(false))
	})
	return reconcile.Result{}, err
}
