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
	for _, r := range p.Spec.Resources {
		if (slices.Contains(r.APIGroups, "*") || slices.Contains(r.APIGroups, gr.Group)) &&
			(slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, gr.Resource)) {
			return true
		}
	}
	return false
}

// Covers says whether the policy applies to an object of resource gr with
// the given labels, in a namespace with nsLabels (nil for cluster-scoped
// objects, whose namespaceSelector is ignored as the API server does).
func Covers(p *v1alpha1.ProtectionPolicy, gr schema.GroupResource, nsLabels, objLabels map[string]string) bool {
	if !CoversResource(p, gr) {
		return false
	}
	if nsLabels != nil && !matches(p.Spec.NamespaceSelector, nsLabels) {
		return false
	}
	return matches(p.Spec.ObjectSelector, objLabels)
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
