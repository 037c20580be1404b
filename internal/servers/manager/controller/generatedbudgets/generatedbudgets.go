// Package generatedbudgets makes a PodUnavailableBudget for each workload
// annotated rampart.io/generate-pub and removes it when the annotation goes.
package generatedbudgets

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/budget"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
)

// +kubebuilder:rbac:groups=rampart.io,resources=podunavailablebudgets,verbs=create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get

// SetupWithManager runs one controller per workload kind on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	for _, w := range []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		if err := ctrl.NewControllerManagedBy(mgr).Named("generated-budgets-"+strings.ToLower(kindOf(w))).
			For(w, builder.OnlyMetadata).
			Owns(&v1alpha1.PodUnavailableBudget{}).
			// Budgets generated at a workload's creation have no owner yet.
			Watches(&v1alpha1.PodUnavailableBudget{}, handler.EnqueueRequestsFromMapFunc(unownedGeneratedFor(kindOf(w)))).
			Complete(r.forKind(w)); err != nil {
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
		k, name, _ := strings.Cut(o.GetAnnotations()[pub.AnnotationGeneratedFor], "/")
		if k != kind || metav1.GetControllerOf(o) != nil {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
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
	return metav1.GetControllerOf(b) == nil && b.Annotations[pub.AnnotationGeneratedFor] == kind+"/"+name
}

// deleteOrphan deletes a budget generated for a workload whose creation
// was admitted but never stored (another webhook refused it).
func (g *generatedFor) deleteOrphan(ctx context.Context, req reconcile.Request, kind string) (reconcile.Result, error) {
	b := &v1alpha1.PodUnavailableBudget{}
	if err := g.Client.Get(ctx, req.NamespacedName, b); err != nil || !adoptable(b, kind, req.Name) {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if wait := orphanGrace - time.Since(b.CreationTimestamp.Time); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	// The cache may lag: only a live read says the workload never came.
	w := g.kind.DeepCopyObject().(client.Object)
	if err := g.Reader.Get(ctx, req.NamespacedName, w); !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, client.IgnoreNotFound(g.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID}))
}

// Reconciler makes a PodUnavailableBudget for each workload
// annotated rampart.io/generate-pub: "true", owned by the workload (the
// garbage collector deletes it with the workload), and removes it when the
// annotation goes.
type Reconciler struct {
	Client   client.Client
	Reader   client.Reader
	Recorder events.EventRecorder
}

type generatedFor struct {
	*Reconciler
	kind client.Object
}

func (r *Reconciler) forKind(obj client.Object) reconcile.Reconciler {
	return &generatedFor{Reconciler: r, kind: obj}
}

func (g *generatedFor) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// Every workload's changes reach here: read its metadata from the
	// cache, and the whole object only when it asks for a budget.
	gvk, err := apiutil.GVKForObject(g.kind, g.Client.Scheme())
	if err != nil {
		return reconcile.Result{}, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	if err := g.Client.Get(ctx, req.NamespacedName, m); err != nil {
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
		if err := g.Reader.Get(ctx, req.NamespacedName, w); err != nil {
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
	err = g.Client.Get(ctx, req.NamespacedName, existing)
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
			if err := g.Reader.Get(ctx, req.NamespacedName, live); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			} else if err == nil && live.GetAnnotations()[v1alpha1.AnnotationGeneratePUB] == "true" && live.GetDeletionTimestamp() == nil {
				return reconcile.Result{Requeue: true}, nil
			}
		}
		return reconcile.Result{}, client.IgnoreNotFound(g.Client.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}))
	}
	if found && !ours {
		g.Recorder.Eventf(w, nil, corev1.EventTypeWarning, "BudgetNotGenerated", "Generate",
			"PodUnavailableBudget %s/%s exists and is not owned by this %s; rename or delete it to let Rampart generate one",
			req.Namespace, req.Name, kind)
		return reconcile.Result{}, nil
	}
	spec, err := budget.GeneratedSpec(w.GetAnnotations(), rolling)
	if err != nil {
		g.Recorder.Eventf(w, nil, corev1.EventTypeWarning, "BudgetNotGenerated", "Generate", "%v", err)
		return reconcile.Result{}, nil
	}
	pub := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
	_, err = controllerutil.CreateOrUpdate(ctx, g.Client, pub, func() error {
		if pub.Labels == nil {
			pub.Labels = map[string]string{}
		}
		pub.Labels["app.kubernetes.io/managed-by"] = "rampart"
		pub.Spec.TargetRef = &v1alpha1.TargetReference{APIVersion: "apps/v1", Kind: kind, Name: req.Name}
		pub.Spec.Selector = nil
		pub.Spec.MaxUnavailable, pub.Spec.MinAvailable = spec.MaxUnavailable, spec.MinAvailable
		pub.Spec.GroupBy, pub.Spec.MaxGroupsDisrupted, pub.Spec.Gang = spec.GroupBy, spec.MaxGroupsDisrupted, spec.Gang
		return controllerutil.SetControllerReference(w, pub, g.Client.Scheme(), controllerutil.WithBlockOwnerDeletion(false))
	})
	return reconcile.Result{}, err
}
