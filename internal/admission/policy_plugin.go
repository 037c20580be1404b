package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"

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
			if ns := namespaceRelabelWebhook(p, b); ns != nil {
				out = append(out, own(PolicyOwner(p.Name), *ns)...)
			}
		}
	}
	return out
}

// namespaceRelabelWebhook reaches a label change that brings a namespace
// under a policy guarding replicas: the API server matches the selector of
// a Namespace's own webhook against the namespace's new labels, so only
// the relabels into the policy's namespaceSelector reach it, and the
// handler admits one once the scale subresource of the namespace's
// workloads is guarded (a Scale carries no labels: that webhook names its
// workloads). A policy over every namespace needs none.
func namespaceRelabelWebhook(p v1alpha1.ProtectionPolicy, b Builder) *admissionregistrationv1.ValidatingWebhook {
	sel := p.Spec.NamespaceSelector
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return nil
	}
	h := b.Webhook(p.Name+".namespaces.policy.rampart.io", PolicyReplicasPrefix+p.Name, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
			Resources: []string{"namespaces"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
	})
	h.NamespaceSelector = withNotOwn(sel, b.NotOwn)
	h.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name: "labels-changed",
		Expression: `has(object.metadata.labels) != has(oldObject.metadata.labels) || ` +
			`(has(object.metadata.labels) && object.metadata.labels != oldObject.metadata.labels)`,
	}}
	h.TimeoutSeconds = ptr.To(inForceTimeout)
	if !policy.Enforced(&p) {
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	}
	return &h
}
