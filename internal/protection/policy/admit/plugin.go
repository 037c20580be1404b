// Package admit is the ProtectionPolicy protection as the API server sees
// it: a deletion and a replicas webhook per policy (plugin.go), served by
// the deletion and replicas handlers it shares with the labels
// (admission.Guards). The decision itself is the parent package.
package admit

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// Plugin is the protection ProtectionPolicies give: a deletion and
// a replicas webhook per policy, scoped by its resources and selectors.
type Plugin struct {
	rampartadmission.Guards
	// Its Ready condition says which engine enforces its static rules.
	rampartadmission.WantsCompiledPolicies
}

// Kind is the kind whose objects are ProtectionPolicies.
const Kind = rampartadmission.PolicyKind

// Owner is the owner of a ProtectionPolicy's webhooks.
func Owner(name string) rampartadmission.Owner { return rampartadmission.PolicyOwner(name) }

// Each ProtectionPolicy gets webhooks of its own, scoped by its resources
// and selectors, served under these prefixes followed by the policy name.
const (
	DeletionPrefix = "/validate/policy/deletion/"
	ReplicasPrefix = "/validate/policy/replicas/"
)

func (*Plugin) Name() string { return "protectionpolicy" }

// Widenings: a namespace just relabelled into a policy is reached by the
// policy's webhooks by name for a while (brought by the replicas
// handler's namespaceInForce through InForce.Widen).
func (*Plugin) Widenings() rampartadmission.WideningSet {
	return rampartadmission.WideningSet{Name: rampartadmission.RelabelledWidening}
}

func (*Plugin) Objects() rampartadmission.ObjectKind {
	return rampartadmission.NewObjectKind[v1alpha1.ProtectionPolicy, *v1alpha1.ProtectionPolicy, v1alpha1.ProtectionPolicyList](Kind, "protectionpolicies", false)
}

func (p *Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{
		{Path: DeletionPrefix, Handler: p.DeletionHandler(), WithContext: rampartadmission.PolicyFromPath(DeletionPrefix)},
		{Path: ReplicasPrefix, Handler: p.ReplicasHandler(), WithContext: rampartadmission.PolicyFromPath(ReplicasPrefix)},
	}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	var out []rampartadmission.Webhook
	for _, pp := range rampartadmission.ObjectsOf[*v1alpha1.ProtectionPolicy](reg, Kind) {
		p := *pp
		out = append(out, policyWebhooks(p, p.Name, rampartadmission.WithNotOwn(p.Spec.NamespaceSelector, b.NotOwn), b)...)
		if ns := namespaceRelabelWebhook(p, b); ns != nil {
			out = append(out, rampartadmission.Own(Owner(p.Name), *ns)...)
		}
	}
	for _, r := range rampartadmission.Widened[*v1alpha1.ProtectionPolicy](reg, rampartadmission.RelabelledWidening) {
		// By name: the namespace is not Rampart's (the relabel webhook
		// never reaches it) and its name label never changes.
		out = append(out, policyWebhooks(*r.Object, r.Object.Name+"."+r.Key+".relabelled", rampartadmission.InNamespaces([]string{r.Key}), b)...)
	}
	return out
}

// policyWebhooks are a policy's deletion and replicas webhooks, named
// after prefix, reaching the namespaces nsSel selects.
func policyWebhooks(p v1alpha1.ProtectionPolicy, prefix string, nsSel *metav1.LabelSelector, b rampartadmission.Builder) []rampartadmission.Webhook {
	var out []rampartadmission.Webhook
	scoped := func(h admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.ValidatingWebhook {
		h.NamespaceSelector = nsSel
		h.ObjectSelector = rampartadmission.OrEverything(p.Spec.ObjectSelector)
		if !policy.Enforced(&p) {
			// A policy that only warns must never block anything.
			h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}
		return h
	}
	if p.Spec.Protection != "" {
		out = append(out, rampartadmission.Own(Owner(p.Name), scoped(b.Webhook(prefix+".deletion.policy.rampart.io", DeletionPrefix+p.Name,
			policyRules(admissionregistrationv1.Delete, p)...)))...)
	}
	if policy.Guard(&p) != "" {
		// CREATE too: a workload created under the policy gets its
		// scale subresource guarded before the creation is admitted.
		rules := policyRules(admissionregistrationv1.Update, p)
		for i := range rules {
			rules[i].Operations = append(rules[i].Operations, admissionregistrationv1.Create)
		}
		h := scoped(b.Webhook(prefix+".replicas.policy.rampart.io", ReplicasPrefix+p.Name, rules...))
		h.TimeoutSeconds = ptr.To(rampartadmission.InForceTimeout)
		out = append(out, rampartadmission.Own(Owner(p.Name), h)...)
	}
	return out
}

// namespaceRelabelWebhook reaches a label change that brings a namespace
// under a policy: the API server matches the selector of a Namespace's own
// webhook against the namespace's new labels, so only the relabels into
// the policy's namespaceSelector reach it. The handler admits one once the
// policy's webhooks reach the namespace by name (rampartadmission.RelabelledWidening):
// the API server's cache of namespace labels, which its other webhooks are
// matched with, may lag the relabel, and a Scale carries no labels at all.
// A policy over every namespace needs none.
func namespaceRelabelWebhook(p v1alpha1.ProtectionPolicy, b rampartadmission.Builder) *admissionregistrationv1.ValidatingWebhook {
	sel := p.Spec.NamespaceSelector
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return nil
	}
	h := b.Webhook(p.Name+".namespaces.policy.rampart.io", ReplicasPrefix+p.Name, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
			Resources: []string{"namespaces"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
	})
	h.NamespaceSelector = rampartadmission.WithNotOwn(sel, b.NotOwn)
	h.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name: "labels-changed",
		Expression: `has(object.metadata.labels) != has(oldObject.metadata.labels) || ` +
			`(has(object.metadata.labels) && object.metadata.labels != oldObject.metadata.labels)`,
	}}
	h.TimeoutSeconds = ptr.To(rampartadmission.InForceTimeout)
	if !policy.Enforced(&p) {
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	}
	return &h
}

// policyRules are the rules of a policy's webhook: its resources.
func policyRules(op admissionregistrationv1.OperationType, p v1alpha1.ProtectionPolicy) []admissionregistrationv1.RuleWithOperations {
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(p.Spec.Resources))
	for _, r := range p.Spec.Resources {
		rule := rampartadmission.Rule(op, "", "")
		rule.APIGroups, rule.Resources = r.APIGroups, r.Resources
		out = append(out, rule)
	}
	return out
}
