package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/protection/policy"
)

// scalePlugin guards the scale subresource of the workloads a label or a
// policy guards (served by the labels plugin's replicas handler). A Scale
// carries no labels: the workloads are named in a match condition.
type scalePlugin struct{}

func (scalePlugin) Name() string { return "scale" }

func (scalePlugin) Routes(Deps) []Route { return nil }

func (scalePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, p := range reg.ScaleWidening {
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range p.Spec.Resources {
			rl := rule(admissionregistrationv1.Update, "", "")
			rl.APIGroups, rl.Resources = r.APIGroups, nil
			for _, res := range r.Resources {
				rl.Resources = append(rl.Resources, res+"/scale")
			}
			rules = append(rules, rl)
		}
		// Only the namespace selector applies.
		h := b.Webhook(p.Name+".scale.policy.rampart.io", ReplicasPath, rules...)
		h.NamespaceSelector = withNotOwn(p.Spec.NamespaceSelector, b.NotOwn)
		if !policy.Enforced(&p) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}
		out = append(out, own(PolicyOwner(p.Name), h)...)
	}
	if len(reg.ScaleTargets) > 0 {
		scale := b.Webhook("scale.rampart.io", ReplicasPath, rule(admissionregistrationv1.Update, "*", "*/scale"))
		if len(reg.ScaleTargets) <= maxScaleTargets {
			scale.MatchConditions = []admissionregistrationv1.MatchCondition{{
				Name:       "explicit-replicas-workload",
				Expression: scaleTargetExpression(reg.ScaleTargets),
			}}
		}
		out = append(out, own(Owner{}, scale)...)
	}
	return out
}
