// Package admit is the scale protection as the API server sees it: the
// webhook that sends writes of the scale subresource of the workloads a
// label or a policy guards to the replicas handler
// (internal/protection/admission), and its widenings while the view that
// lists those workloads may lag. A Scale carries no labels: the workloads
// are named in a match condition.
package admit

import (
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// Plugin guards the scale subresource of the workloads a label or a
// policy guards (served by the labels plugin's replicas handler).
type Plugin struct {
	rampartadmission.WantsScaleKeys
}

// Widening is the widening set of the policies just admitted that guard
// replicas: the view that lists the workloads they cover may lag, so for
// a while the scale subresource of their resources is judged in every
// namespace they select.
const Widening = "scale"

// maxScaleTargets bounds the target list written into the scale webhook's
// match condition. Past it the webhook judges every scale write of a
// workload, which is correct but lets an outage of Rampart block scaling of
// unguarded workloads too.
const maxScaleTargets = 1000

func (*Plugin) Name() string { return "scale" }

func (*Plugin) Routes() []rampartadmission.Route { return nil }

// Keys are the workloads the label or a policy of reg guards
// (rampartadmission.ScaleTargetKeys).
func (p *Plugin) Keys() rampartadmission.KeySet {
	if p.ScaleKeys == nil {
		return rampartadmission.KeySet{Name: rampartadmission.ScaleTargetKeys}
	}
	return rampartadmission.KeySet{Name: rampartadmission.ScaleTargetKeys, HasSynced: p.ScaleKeys.HasSynced, Changes: p.ScaleKeys.Changes(),
		// The labelled workloads and those reg's policies guard, in one
		// pass over the view.
		All: func(reg rampartadmission.Registration) []string { return p.ScaleKeys.Targets(policies(reg)) },
		// What a pending policy brings.
		OfObjects: func(reg rampartadmission.Registration) []string {
			ps := policies(reg)
			if len(ps) == 0 {
				return nil
			}
			return p.ScaleKeys.Targets(ps)
		}}
}

// policies are reg's ProtectionPolicies.
func policies(reg rampartadmission.Registration) []v1alpha1.ProtectionPolicy {
	var out []v1alpha1.ProtectionPolicy
	for _, pol := range rampartadmission.ObjectsOf[*v1alpha1.ProtectionPolicy](reg, rampartadmission.PolicyKind) {
		out = append(out, *pol)
	}
	return out
}

// Widenings: a policy put in force that guards replicas widens the scale
// webhook for its resources (Widening).
func (*Plugin) Widenings() rampartadmission.WideningSet {
	return rampartadmission.WideningSet{Name: Widening, OfObject: func(obj client.Object) []rampartadmission.Widening {
		if p, ok := obj.(*v1alpha1.ProtectionPolicy); ok && policy.Guard(p) != "" {
			return []rampartadmission.Widening{{Object: p}}
		}
		return nil
	}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	targets := reg.Keys[rampartadmission.ScaleTargetKeys]
	var out []rampartadmission.Webhook
	for _, w := range rampartadmission.Widened[*v1alpha1.ProtectionPolicy](reg, Widening) {
		p := *w.Object
		out = append(out, scaleWidening(p, p.Name, rampartadmission.WithNotOwn(p.Spec.NamespaceSelector, b.NotOwn), b)...)
	}
	for _, r := range rampartadmission.Widened[*v1alpha1.ProtectionPolicy](reg, rampartadmission.RelabelledWidening) {
		if policy.Guard(r.Object) != "" {
			out = append(out, scaleWidening(*r.Object, r.Object.Name+"."+r.Key+".relabelled", rampartadmission.InNamespaces([]string{r.Key}), b)...)
		}
	}
	if len(targets) > 0 {
		scale := b.Webhook("scale.rampart.io", rampartadmission.ReplicasPath, rampartadmission.Rule(admissionregistrationv1.Update, "*", "*/scale"))
		if len(targets) <= maxScaleTargets {
			scale.MatchConditions = []admissionregistrationv1.MatchCondition{{
				Name:       "explicit-replicas-workload",
				Expression: scaleTargetExpression(targets),
			}}
		}
		out = append(out, rampartadmission.Own(rampartadmission.Owner{}, scale)...)
	}
	return out
}

// scaleWidening judges every scale of a policy's resources in the
// namespaces nsSel selects (only the namespace selector applies).
func scaleWidening(p v1alpha1.ProtectionPolicy, prefix string, nsSel *metav1.LabelSelector, b rampartadmission.Builder) []rampartadmission.Webhook {
	var rules []admissionregistrationv1.RuleWithOperations
	for _, r := range p.Spec.Resources {
		rl := rampartadmission.Rule(admissionregistrationv1.Update, "", "")
		rl.APIGroups, rl.Resources = r.APIGroups, nil
		for _, res := range r.Resources {
			rl.Resources = append(rl.Resources, res+"/scale")
		}
		rules = append(rules, rl)
	}
	h := b.Webhook(prefix+".scale.policy.rampart.io", rampartadmission.ReplicasPath, rules...)
	h.NamespaceSelector = nsSel
	if !policy.Enforced(&p) {
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	}
	return rampartadmission.Own(rampartadmission.PolicyOwner(p.Name), h)
}

// scaleTargetExpression is a CEL condition true for requests about one of
// the targets.
func scaleTargetExpression(targets []string) string {
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = strconv.Quote(t)
	}
	return "[request.resource.group, request.resource.resource, request.namespace, request.name].join('/') in [" +
		strings.Join(quoted, ", ") + "]"
}
