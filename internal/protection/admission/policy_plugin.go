package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"

	"github.com/rampart-io/rampart/internal/protection/policy"
)

// PolicyPlugin is the protection ProtectionPolicies give: a deletion and
// a replicas webhook per policy, scoped by its resources and selectors.
type PolicyPlugin struct{ guards }

// PolicyKind is the kind whose objects are ProtectionPolicies.
const PolicyKind = "ProtectionPolicy"

// PolicyOwner is the owner of a ProtectionPolicy's webhooks.
func PolicyOwner(name string) Owner { return Owner{Kind: PolicyKind, Name: name} }

func (*PolicyPlugin) Name() string { return "protectionpolicy" }

func (*PolicyPlugin) Objects() ObjectKind {
	return NewObjectKind[v1alpha1.ProtectionPolicy, *v1alpha1.ProtectionPolicy, v1alpha1.ProtectionPolicyList](PolicyKind, "protectionpolicies", false)
}

func (p *PolicyPlugin) Routes() []Route {
	return []Route{
		{Path: PolicyDeletionPrefix, Handler: p.deletion(), WithContext: PolicyFromPath(PolicyDeletionPrefix)},
		{Path: PolicyReplicasPrefix, Handler: p.replicas(), WithContext: PolicyFromPath(PolicyReplicasPrefix)},
	}
}

func (*PolicyPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, pp := range ObjectsOf[*v1alpha1.ProtectionPolicy](reg, PolicyKind) {
		p := *pp
		out = append(out, policyWebhooks(p, p.Name, WithNotOwn(p.Spec.NamespaceSelector, b.NotOwn), b)...)
		if ns := namespaceRelabelWebhook(p, b); ns != nil {
			out = append(out, Own(PolicyOwner(p.Name), *ns)...)
		}
	}
	for _, r := range reg.Relabelled {
		// By name: the namespace is not Rampart's (the relabel webhook
		// never reaches it) and its name label never changes.
		out = append(out, policyWebhooks(r.Policy, r.Policy.Name+"."+r.Namespace+".relabelled", InNamespaces([]string{r.Namespace}), b)...)
	}
	return out
}

// policyWebhooks are a policy's deletion and replicas webhooks, named
// after prefix, reaching the namespaces nsSel selects.
func policyWebhooks(p v1alpha1.ProtectionPolicy, prefix string, nsSel *metav1.LabelSelector, b Builder) []Webhook {
	var out []Webhook
	scoped := func(h admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.ValidatingWebhook {
		h.NamespaceSelector = nsSel
		h.ObjectSelector = OrEverything(p.Spec.ObjectSelector)
		if !policy.Enforced(&p) {
			// A policy that only warns must never block anything.
			h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}
		return h
	}
	if p.Spec.Protection != "" {
		out = append(out, Own(PolicyOwner(p.Name), scoped(b.Webhook(prefix+".deletion.policy.rampart.io", PolicyDeletionPrefix+p.Name,
			policyRules(admissionregistrationv1.Delete, p)...)))...)
	}
	if policy.Guard(&p) != "" {
		// CREATE too: a workload created under the policy gets its
		// scale subresource guarded before the creation is admitted.
		rules := policyRules(admissionregistrationv1.Update, p)
		for i := range rules {
			rules[i].Operations = append(rules[i].Operations, admissionregistrationv1.Create)
		}
		h := scoped(b.Webhook(prefix+".replicas.policy.rampart.io", PolicyReplicasPrefix+p.Name, rules...))
		h.TimeoutSeconds = ptr.To(InForceTimeout)
		out = append(out, Own(PolicyOwner(p.Name), h)...)
	}
	return out
}

// namespaceRelabelWebhook reaches a label change that brings a namespace
// under a policy: the API server matches the selector of a Namespace's own
// webhook against the namespace's new labels, so only the relabels into
// the policy's namespaceSelector reach it. The handler admits one once the
// policy's webhooks reach the namespace by name (Registration.Relabelled):
// the API server's cache of namespace labels, which its other webhooks are
// matched with, may lag the relabel, and a Scale carries no labels at all.
// A policy over every namespace needs none.
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
	h.NamespaceSelector = WithNotOwn(sel, b.NotOwn)
	h.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name: "labels-changed",
		Expression: `has(object.metadata.labels) != has(oldObject.metadata.labels) || ` +
			`(has(object.metadata.labels) && object.metadata.labels != oldObject.metadata.labels)`,
	}}
	h.TimeoutSeconds = ptr.To(InForceTimeout)
	if !policy.Enforced(&p) {
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	}
	return &h
}
