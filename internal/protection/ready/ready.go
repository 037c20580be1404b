// Package ready writes the Ready condition of the objects Rampart
// registers webhooks for (ProtectionPolicies, ChangeWindows,
// DeletionFlowControls, RecyclePolicies): True once the registered webhook
// configuration holds the webhooks the object owns as its current spec
// makes them. One generic controller serves every such kind; a kind
// declares a Kind value (where its status lives, and what of its
// condition is its own) and the manager runs New(…, kind).
package ready

import (
	"context"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Registering is the reason of a Ready condition that waits for webhooks.
const Registering = "Registering"

// Kind declares how the Ready condition of one kind of object (T, a CRD
// type such as v1alpha1.ChangeWindow) is made. Status is required. The
// webhooks the condition waits for are those obj owns as its current spec
// makes them (admission.ObjectWebhooks).
type Kind[T any] struct {
	// Status is where obj's conditions and observed generation live.
	Status func(obj *T) (conditions *[]metav1.Condition, observedGeneration *int64)
	// Reason is the reason of a True condition; Detail follows its
	// message, "webhooks NAMES registered".
	Reason, Detail string
	// Judge, if set, is the kind's own say (see Verdict). It may set
	// other fields of obj's status.
	Judge func(ctx context.Context, obj *T, reg rampartadmission.Registration, now time.Time) (Verdict, error)
	// Also, if set, is what else the condition reads: its events look
	// again at the objects it names.
	Also func(c client.Reader) source.Source
}

// A Verdict is what of an object's Ready condition its kind decides.
type Verdict struct {
	// Unready, if set, is the reason the object is not Ready whatever
	// its webhooks (an invalid spec, the recycle bin off); Why is the
	// condition's message.
	Unready, Why string
	// Detail follows the kind's Detail in a True condition's message.
	Detail string
	// Later is when to look again unless the webhooks are still being
	// registered (then it is a second); zero for never.
	Later time.Duration
}

// Object is what the controller needs of *T.
type Object[T any] interface {
	*T
	client.Object
}

// Reconciler writes the Ready condition of the objects of one Kind.
type Reconciler[T any, PT Object[T]] struct {
	Client client.Client
	// Registration is the endpoint and CA part of what is registered.
	Registration func() rampartadmission.Registration
	Kind         Kind[T]
	// Now is the clock a Judge reads; nil is the real one.
	Now func() time.Time
}

// New is the Ready controller of kind's objects.
func New[T any, PT Object[T]](c client.Client, reg func() rampartadmission.Registration, kind Kind[T]) *Reconciler[T, PT] {
	return &Reconciler[T, PT]{Client: c, Registration: reg, Kind: kind}
}

func (r *Reconciler[T, PT]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := PT(new(T))
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	before := obj.DeepCopyObject()
	cond, later, err := r.condition(ctx, obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	conds, observed := r.Kind.Status(obj)
	meta.SetStatusCondition(conds, cond)
	*observed = obj.GetGeneration()
	if !equality.Semantic.DeepEqual(before, runtime.Object(obj)) {
		// A conflict (a counted delete wrote the status meanwhile)
		// requeues.
		if err := r.Client.Status().Update(ctx, obj); err != nil {
			return reconcile.Result{}, err
		}
	}
	if cond.Reason == Registering {
		// The configuration's own changes may not come as an event for
		// every owner.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{RequeueAfter: later}, nil
}

// condition is obj's Ready condition, and when to look again once its
// webhooks are registered.
func (r *Reconciler[T, PT]) condition(ctx context.Context, obj PT) (metav1.Condition, time.Duration, error) {
	reg := r.Registration()
	var v Verdict
	if r.Kind.Judge != nil {
		now := time.Now()
		if r.Now != nil {
			now = r.Now()
		}
		var err error
		if v, err = r.Kind.Judge(ctx, obj, reg, now); err != nil {
			return metav1.Condition{}, 0, err
		}
	}
	gen := obj.GetGeneration()
	if v.Unready != "" {
		return metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: v.Unready, ObservedGeneration: gen, Message: v.Why}, v.Later, nil
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg); err != nil && !apierrors.IsNotFound(err) {
		return metav1.Condition{}, 0, err
	}
	want := rampartadmission.ObjectWebhooks(reg, obj)
	return Decide(cfg.Webhooks, want, gen, r.Kind.Reason, r.Kind.Detail+v.Detail), v.Later, nil
}

// Decide is the Ready condition at generation gen of an object whose
// webhooks are want when the configuration holds have. Registered, it is
// True with reason and "webhooks NAMES registered" + detail; else False,
// Registering.
func Decide(have, want []admissionregistrationv1.ValidatingWebhook, gen int64, reason, detail string) metav1.Condition {
	names := make([]string, len(want))
	ok := true
	for i, w := range want {
		names[i] = w.Name
		ok = ok && Registered(have, w)
	}
	list := strings.Join(names, ", ")
	noun := "webhooks "
	if len(want) == 1 {
		noun = "webhook "
	}
	if !ok {
		return metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: Registering, ObservedGeneration: gen,
			Message: "waiting for the webhook configuration to include " + list}
	}
	msg := noun + list + " registered"
	if len(want) == 0 {
		// A ProtectionPolicy with only explicitDeletion: a controller
		// labels pods, no webhook judges anything.
		msg = "no webhook needed"
	}
	return metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, ObservedGeneration: gen,
		Message: msg + detail}
}

// Registered says whether have holds want as it decides the webhook's
// reach (not its endpoint).
func Registered(have []admissionregistrationv1.ValidatingWebhook, want admissionregistrationv1.ValidatingWebhook) bool {
	for _, h := range have {
		if h.Name == want.Name {
			return equality.Semantic.DeepEqual(h.Rules, want.Rules) &&
				equality.Semantic.DeepEqual(h.NamespaceSelector, want.NamespaceSelector) &&
				equality.Semantic.DeepEqual(h.ObjectSelector, want.ObjectSelector) &&
				equality.Semantic.DeepEqual(h.FailurePolicy, want.FailurePolicy)
		}
	}
	return false
}

// SetupWithManager runs the reconciler on the leader, named after the
// kind ("changewindow-status"): on the object's changes, for all of them
// when the webhook configuration changes (their Ready condition follows
// it), and on the events of the kind's Also.
func (r *Reconciler[T, PT]) SetupWithManager(mgr ctrl.Manager) error {
	obj := PT(new(T))
	gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
	if err != nil {
		return err
	}
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		o, err := mgr.GetScheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			return nil
		}
		l := o.(client.ObjectList)
		if err := mgr.GetClient().List(ctx, l); err != nil {
			return nil
		}
		var out []reconcile.Request
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			if m, err := meta.Accessor(o); err == nil {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
			}
			return nil
		})
		return out
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(gvk.Kind)+"-status").
		For(obj).
		Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, all)
	if r.Kind.Also != nil {
		b = b.WatchesRawSource(r.Kind.Also(r.Client))
	}
	return b.Complete(r)
}
