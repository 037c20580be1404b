package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"

	"github.com/rampart-io/rampart/internal/protection/policy"
)

// ScalePlugin guards the scale subresource of the workloads a label or a
// policy guards (served by the labels plugin's replicas handler). A Scale
// carries no labels: the workloads are named in a match condition.
type ScalePlugin struct{ WantsScaleKeys }

// ScaleTargetKeys is the key set of the workloads whose scale subresource
// is guarded, as "group/resource/namespace/name".
const ScaleTargetKeys = "scale"

func (*ScalePlugin) Name() string { return "scale" }

func (*ScalePlugin) Routes() []Route { return nil }

// Keys are the workloads the label or a policy of reg guards.
func (p *ScalePlugin) Keys() KeySet {
	if p.ScaleKeys == nil {
		return KeySet{Name: ScaleTargetKeys}
	}
	return KeySet{Name: ScaleTargetKeys, HasSynced: p.ScaleKeys.HasSynced, Changes: p.ScaleKeys.Changes(),
		// The labelled workloads, and those the policies of reg guard.
		Cached: func() []string { return p.ScaleKeys.Targets(nil) },
		OfObjects: func(reg Registration) []string {
			var policies []v1alpha1.ProtectionPolicy
			for _, pol := range ObjectsOf[*v1alpha1.ProtectionPolicy](reg, PolicyKind) {
				policies = append(policies, *pol)
			}
			if len(policies) == 0 {
				return nil
			}
			return p.ScaleKeys.Targets(policies)
		}}
}

func (*ScalePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	targets := reg.Keys[ScaleTargetKeys]
	var out []Webhook
	for _, p := range reg.ScaleWidening {
		out = append(out, scaleWidening(p, p.Name, WithNotOwn(p.Spec.NamespaceSelector, b.NotOwn), b)...)
	}
	for _, r := range reg.Relabelled {
		if policy.Guard(&r.Policy) != "" {
			out = append(out, scaleWidening(r.Policy, r.Policy.Name+"."+r.Namespace+".relabelled", InNamespaces([]string{r.Namespace}), b)...)
		}
	}
	if len(targets) > 0 {
		scale := b.Webhook("scale.rampart.io", ReplicasPath, Rule(admissionregistrationv1.Update, "*", "*/scale"))
		if len(targets) <= maxScaleTargets {
			scale.MatchConditions = []admissionregistrationv1.MatchCondition{{
				Name:       "explicit-replicas-workload",
				Expression: scaleTargetExpression(targets),
			}}
		}
		out = append(out, Own(Owner{}, scale)...)
	}
	return out
}

// scaleWidening judges every scale of a policy's resources in the
// namespaces nsSel selects (only the namespace selector applies).
func scaleWidening(p v1alpha1.ProtectionPolicy, prefix string, nsSel *metav1.LabelSelector, b Builder) []Webhook {
	var rules []admissionregistrationv1.RuleWithOperations
	for _, r := range p.Spec.Resources {
		rl := Rule(admissionregistrationv1.Update, "", "")
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
	return Own(PolicyOwner(p.Name), h)
}
