// Package ready writes the Ready condition of the objects Rampart
// registers webhooks for (ProtectionPolicies, ChangeWindows,
// DeletionFlowControls): True once the registered webhook configuration
// holds the webhooks the object owns as its current spec makes them.
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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	rampartadmission "github.com/rampart-io/rampart/internal/admission"
)

// Registering is the reason of a Ready condition that waits for webhooks.
const Registering = "Registering"

// Condition is owner's Ready condition at generation gen: its webhooks as
// reg makes them (reg's own lists replaced by the owner's object alone)
// compared with those the live configuration holds. Registered, it is
// True with reason and "webhooks NAMES registered" + detail; else False,
// Registering. names are the webhooks' names.
func Condition(ctx context.Context, c client.Reader, reg rampartadmission.Registration, owner rampartadmission.Owner, gen int64, reason, detail string) (metav1.Condition, error) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg); err != nil && !apierrors.IsNotFound(err) {
		return metav1.Condition{}, err
	}
	return Decide(cfg.Webhooks, rampartadmission.OwnedWebhooks(reg, owner), gen, reason, detail), nil
}

// Decide is the Ready condition of an object whose webhooks are want when
// the configuration holds have.
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

// Set puts cond and the observed generation into obj's status (conds and
// observed point into it) and writes the status when it differs from
// before, a copy taken before the reconciler changed anything.
func Set(ctx context.Context, c client.Client, obj client.Object, conds *[]metav1.Condition, observed *int64, before, status any, cond metav1.Condition) error {
	meta.SetStatusCondition(conds, cond)
	*observed = obj.GetGeneration()
	if equality.Semantic.DeepEqual(before, status) {
		return nil
	}
	// A conflict (a counted delete wrote the status meanwhile) requeues.
	return c.Status().Update(ctx, obj)
}

// Apply is Set, then when to look again: in a second while the webhooks
// are still being registered (the configuration's own changes may not
// come as an event for every owner), else after later, zero for never.
func Apply(ctx context.Context, c client.Client, obj client.Object, conds *[]metav1.Condition, observed *int64, before, status any, cond metav1.Condition, later time.Duration) (reconcile.Result, error) {
	if err := Set(ctx, c, obj, conds, observed, before, status, cond); err != nil {
		return reconcile.Result{}, err
	}
	if cond.Reason == Registering {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{RequeueAfter: later}, nil
}

// Controller runs r for each object of a kind whose webhooks Rampart
// registers: on the object's changes, for all of them when the webhook
// configuration changes (their Ready condition follows it), and on the
// events of also (what else a condition reads).
func Controller(mgr ctrl.Manager, name string, obj client.Object, list client.ObjectList, r reconcile.Reconciler, also ...source.Source) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
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
		Named(name).
		For(obj).
		Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, all)
	for _, src := range also {
		b = b.WatchesRawSource(src)
	}
	return b.Complete(r)
}
