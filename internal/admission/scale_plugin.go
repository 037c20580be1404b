package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"

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
		out = append(out, scaleWidening(p, p.Name, withNotOwn(p.Spec.NamespaceSelector, b.NotOwn), b)...)
	}
	for _, r := range reg.Relabelled {
		if policy.Guard(&r.Policy) != "" {
			out = append(out, scaleWidening(r.Policy, r.Policy.Name+"."+r.Namespace+".relabelled", inNamespaces([]string{r.Namespace}), b)...)
		}
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

// scaleWidening judges every scale of a policy's resources in the
// namespaces nsSel selects (only the namespace selector applies).
func scaleWidening(p v1alpha1.ProtectionPolicy, prefix string, nsSel *metav1.LabelSelector, b Builder) []Webhook {
	var rules []admissionregistrationv1.RuleWithOperations
	for _, r := range p.Spec.Resources {
		rl := rule(admissionregistrationv1.Update, "", "")
		rl.APIGroups, rl.Resources = r.APIGroups, nil
		for _, res := range r.Resources {
			rl.Resources = append(rl.Resources, res+"/scale")
		}
		rules = append(rules, rl)
	}
	h := b.Webhook(prefix+".scale.policy.rampart.io", ReplicasPath, rules...)
	h.NamespaceSelector = nsSel
	if !policy.Enforced(&p) {
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	}
	return own(PolicyOwner(p.Name), h)
}
