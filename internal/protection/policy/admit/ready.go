package admit

// A ProtectionPolicy is Ready (the generic controller of
// internal/protection/ready writes it) once the registered webhook
// configuration holds the policy's webhooks as its current spec makes
// them. Its message also says whether the policy's static rules are
// compiled to ValidatingAdmissionPolicies and whether every API server
// enforces them yet, and it follows the CRDs.

import (
	"context"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/ready"
)

// compiledWait is how soon the condition is looked at again while the
// API servers load a policy's compiled rules.
const compiledWait = 2 * time.Second

// leftWait is how soon the condition is looked at again while static
// rules are left to the webhooks: another policy deleted or renamed can
// free the name one needs.
const leftWait = 30 * time.Second

// Readiness is how ProtectionPolicies are Ready (internal/protection/ready
// runs it). compiled, nil when static rules are not compiled, says how
// far they are; onCRDChange, nil when CRDs are not followed, registers a
// function called after any CRD is added, changed or deleted
// (clusterview's): which custom resources have a scale subresource
// decides what of a policy guarding replicas is compiled, and so its
// message.
func Readiness(compiled rampartadmission.CompiledPolicies, onCRDChange func(func())) ready.Kind[v1alpha1.ProtectionPolicy] {
	k := ready.Kind[v1alpha1.ProtectionPolicy]{
		Status: func(p *v1alpha1.ProtectionPolicy) (*[]metav1.Condition, *int64) {
			return &p.Status.Conditions, &p.Status.ObservedGeneration
		},
		Reason: "Enforced",
		Judge: func(ctx context.Context, p *v1alpha1.ProtectionPolicy, _ rampartadmission.Registration, _ time.Time) (ready.Verdict, error) {
			return judge(ctx, p, compiled)
		},
	}
	if onCRDChange != nil {
		k.Also = func(c client.Reader) source.Source { return crdChanges(c, onCRDChange) }
	}
	return k
}

// judge says whether p is enforced or warns only, and which engine
// enforces its static rules.
func judge(ctx context.Context, p *v1alpha1.ProtectionPolicy, compiled rampartadmission.CompiledPolicies) (ready.Verdict, error) {
	mode := "; enforced"
	if !policy.Enforced(p) {
		mode = "; warning only"
	}
	var static rampartadmission.StaticRules
	if compiled != nil {
		var err error
		if static, err = compiled.PolicyState(ctx, p); err != nil {
			return ready.Verdict{}, err
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
	var later time.Duration
	switch {
	case len(static.Names) > 0 && !static.InForce:
		later = compiledWait
	case len(static.Left) > 0:
		later = leftWait
	}
	return ready.Verdict{Detail: mode, Later: later}, nil
}

// crdChanges looks again at the policies guarding replicas after a CRD
// change. The webhook configuration changes with the CRDs too, but only
// while the label rules are compiled and in force: a policy's message
// must not hang on that.
func crdChanges(c client.Reader, onCRDChange func(func())) source.Source {
	changed := make(chan event.GenericEvent, 1)
	onCRDChange(func() {
		select {
		case changed <- event.GenericEvent{Object: &v1alpha1.ProtectionPolicy{}}:
		default: // one pending already: it lists the policies when handled
		}
	})
	return source.Channel(changed, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		return guarding(ctx, c)
	}))
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

// Ready is the controller of the policies' Ready condition.
func (p *Plugin) Ready(c client.Client, reg func() rampartadmission.Registration) rampartadmission.Controller {
	return ready.New(c, reg, Readiness(p.CompiledPolicies, p.OnCRDChange))
}
