// Package policystatus keeps each ProtectionPolicy's Ready condition:
// True once the registered webhook configuration holds the policy's
// webhooks as its current spec makes them. Its message also says whether
// the policy's static rules are compiled to ValidatingAdmissionPolicies
// and whether every API server enforces them yet.
package policystatus

import (
	"context"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/controller/ready"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/registrar"
)

// Reconciler sets the Ready condition of ProtectionPolicies.
type Reconciler struct {
	Client client.Client
	// Registration is the endpoint and CA part of what is registered.
	Registration func() rampartadmission.Registration
	// Compiled says whether the policy's static rules are also compiled
	// to ValidatingAdmissionPolicies, and in force (registrar.Compiled);
	// nil: they are not compiled.
	Compiled interface {
		PolicyState(context.Context, *v1alpha1.ProtectionPolicy) (registrar.StaticRules, error)
	}
	// OnCRDChange registers a function called after any CRD is added,
	// changed or deleted (clusterview's): which custom resources have a
	// scale subresource decides what of a policy guarding replicas is
	// compiled, and so its message. Nil: CRDs are not followed.
	OnCRDChange func(func())
}

// compiledWait is how soon the condition is looked at again while the
// API servers load a policy's compiled rules.
const compiledWait = 2 * time.Second

// leftWait is how soon the condition is looked at again while static
// rules are left to the webhooks: another policy deleted or renamed can
// free the name one needs.
const leftWait = 30 * time.Second

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := &v1alpha1.ProtectionPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	reg := r.Registration()
	reg = reg.With(p)
	mode := "; enforced"
	if !policy.Enforced(p) {
		mode = "; warning only"
	}
	var static registrar.StaticRules
	if r.Compiled != nil {
		var err error
		if static, err = r.Compiled.PolicyState(ctx, p); err != nil {
			return reconcile.Result{}, err
		}
	}
	if len(static.Names) > 0 {
		// Which engine enforces what: the webhooks judge everything from
		// the start; the API server judges the static rules itself once
		// it has loaded them, also while Rampart is down.
		list := strings.Join(static.Names, ", ")
		if static.InForce {
			mode += "; its static rules also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy " + list + ")"
		} else {
			mode += "; compiling its static rules to ValidatingAdmissionPolicy " + list + " (not loaded by every API server yet)"
		}
	}
	if len(static.Left) > 0 {
		whys := make([]string, len(static.Left))
		for i, l := range static.Left {
			whys[i] = l.Why
		}
		mode += "; some static rules left to its webhooks, so not enforced while Rampart is down: " + strings.Join(whys, "; ")
	}
	cond, err := ready.Condition(ctx, r.Client, reg, rampartadmission.PolicyOwner(p.Name), p.Generation, "Enforced", mode)
	if err != nil {
		return reconcile.Result{}, err
	}
	var later time.Duration
	switch {
	case len(static.Names) > 0 && !static.InForce:
		later = compiledWait
	case len(static.Left) > 0:
		later = leftWait
	}
	return ready.Apply(ctx, r.Client, p, &p.Status.Conditions, &p.Status.ObservedGeneration, p.Status.DeepCopy(), &p.Status, cond, later)
}

// SetupWithManager runs the reconciler on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	var also []source.Source
	if r.OnCRDChange != nil {
		// The webhook configuration changes with the CRDs too, but only
		// while the label rules are compiled and in force: a policy's
		// message must not hang on that.
		changed := make(chan event.GenericEvent, 1)
		r.OnCRDChange(func() {
			select {
			case changed <- event.GenericEvent{Object: &v1alpha1.ProtectionPolicy{}}:
			default: // one pending already: it lists the policies when handled
			}
		})
		also = append(also, source.Channel(changed, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			return guarding(ctx, r.Client)
		})))
	}
	return ready.Controller(mgr, "protectionpolicy-status", &v1alpha1.ProtectionPolicy{}, &v1alpha1.ProtectionPolicyList{}, r, also...)
}

// guarding are the policies guarding replicas: only their compiled rules
// depend on the CRDs.
func guarding(ctx context.Context, c client.Reader) []reconcile.Request {
	var l v1alpha1.ProtectionPolicyList
	if err := c.List(ctx, &l); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range l.Items {
		if policy.Guarding(&l.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: l.Items[i].Name}})
		}
	}
	return out
}
