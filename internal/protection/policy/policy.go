// Package policy decides which ProtectionPolicies cover an object: the same
// matching the API server does with a policy's webhook (resources,
// namespaceSelector, objectSelector), for the places where Rampart must do
// it itself (the scale subresource, whose requests carry no labels).
package policy

import (
	"slices"

	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// CoversResource says whether the policy names the resource.
func CoversResource(p *v1alpha1.ProtectionPolicy, gr schema.GroupResource) bool {
	return NamesResource(p.Spec.Resources, gr)
}

// NamesResource says whether any of rules names the resource ("*" for
// every group or resource), as a webhook rule does.
func NamesResource(rules []v1alpha1.ResourceRule, gr schema.GroupResource) bool {
	return slices.ContainsFunc(rules, func(r v1alpha1.ResourceRule) bool {
		return (slices.Contains(r.APIGroups, "*") || slices.Contains(r.APIGroups, gr.Group)) &&
			(slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, gr.Resource))
	})
}

// Covers says whether the policy applies to an object of resource gr with
// the given labels, in a namespace with nsLabels (nil for cluster-scoped
// objects, whose namespaceSelector is ignored as the API server does).
func Covers(p *v1alpha1.ProtectionPolicy, gr schema.GroupResource, nsLabels, objLabels map[string]string) bool {
	return InScope(p.Spec.Resources, p.Spec.NamespaceSelector, p.Spec.ObjectSelector, gr, nsLabels, objLabels)
}

// InScope is Covers for any of Rampart's policies (ProtectionPolicy, RecyclePolicy):
// rules name the resource, nsSel matches nsLabels (nil: not checked) and
// objSel the object's labels; an absent selector matches everything.
func InScope(rules []v1alpha1.ResourceRule, nsSel, objSel *v1.LabelSelector, gr schema.GroupResource, nsLabels, objLabels map[string]string) bool {
	if !NamesResource(rules, gr) {
		return false
	}
	if nsLabels != nil && !matches(nsSel, nsLabels) {
		return false
	}
	return matches(objSel, objLabels)
}

// matches treats an absent selector as matching everything, as webhook
// selectors do.
func matches(sel *v1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := v1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false // CRD validation rejects such selectors; never match one
	}
	return s.Matches(labels.Set(set))
}

// Enforced says whether the policy denies (Enforce) rather than warns.
func Enforced(p *v1alpha1.ProtectionPolicy) bool {
	return p.Spec.Mode != v1alpha1.ModeWarn
}

// Guard is the replica guard of a policy, empty when it guards none.
func Guard(p *v1alpha1.ProtectionPolicy) v1alpha1.ReplicaGuard {
	if p.Spec.ExplicitReplicas == nil {
		return ""
	}
	if p.Spec.ExplicitReplicas.Guard == "" {
		return v1alpha1.GuardAll
	}
	return p.Spec.ExplicitReplicas.Guard
}
