package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/protection/policy"
)

// policyPlugin is the protection ProtectionPolicies give: a deletion and
// a replicas webhook per policy, scoped by its resources and selectors.
type policyPlugin struct{}

func (policyPlugin) Name() string { return "protectionpolicy" }

func (policyPlugin) Routes(d Deps) []Route {
	return []Route{
		{Path: PolicyDeletionPrefix, Handler: d.deletion(), WithContext: PolicyFromPath(PolicyDeletionPrefix)},
		{Path: PolicyReplicasPrefix, Handler: d.replicas(), WithContext: PolicyFromPath(PolicyReplicasPrefix)},
	}
}

func (policyPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, p := range reg.Policies {
		scoped := func(h admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.ValidatingWebhook {
			h.NamespaceSelector = withNotOwn(p.Spec.NamespaceSelector, b.NotOwn)
			h.ObjectSelector = orEverything(p.Spec.ObjectSelector)
			if !policy.Enforced(&p) {
				// A policy that only warns must never block anything.
				h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}
			return h
		}
		if p.Spec.Protection != "" {
			out = append(out, own(PolicyOwner(p.Name), scoped(b.Webhook(p.Name+".deletion.policy.rampart.io", PolicyDeletionPrefix+p.Name,
				policyRules(admissionregistrationv1.Delete, p)...)))...)
		}
		if policy.Guard(&p) != "" {
			// CREATE too: a workload created under the policy gets its
			// scale subresource guarded before the creation is admitted.
			rules := policyRules(admissionregistrationv1.Update, p)
			for i := range rules {
				rules[i].Operations = append(rules[i].Operations, admissionregistrationv1.Create)
			}
			h := scoped(b.Webhook(p.Name+".replicas.policy.rampart.io", PolicyReplicasPrefix+p.Name, rules...))
			h.TimeoutSeconds = ptr.To(inForceTimeout)
			out = append(out, own(PolicyOwner(p.Name), h)...)
		}
	}
	return out
}
