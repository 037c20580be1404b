package policy

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// A Purpose is what a caller selects policies for: a policy takes part
// only in the protections it sets.
type Purpose func(*v1alpha1.ProtectionPolicy) bool

// Protecting selects policies with a deletion protection level.
func Protecting(p *v1alpha1.ProtectionPolicy) bool { return p.Spec.Protection != "" }

// Guarding selects policies that guard replicas.
func Guarding(p *v1alpha1.ProtectionPolicy) bool { return Guard(p) != "" }

// NamespaceLabels are the labels a namespace's objects are matched with.
// A namespace the caller's cache has not seen yet (known false, or no
// labels) gets the one label the API server always sets, so that a
// namespaceSelector on kubernetes.io/metadata.name matches as the API
// server's own webhook matching would.
func NamespaceLabels(ns string, labels map[string]string, known bool) map[string]string {
	if known && labels != nil {
		return labels
	}
	return map[string]string{corev1.LabelMetadataName: ns}
}

// Select returns the policies for purpose that cover an object of gr with
// objLabels in a namespace with nsLabels (nil for cluster-scoped objects).
func Select(policies []v1alpha1.ProtectionPolicy, purpose Purpose, gr schema.GroupResource, nsLabels, objLabels map[string]string) []*v1alpha1.ProtectionPolicy {
	var out []*v1alpha1.ProtectionPolicy
	for i := range policies {
		if purpose(&policies[i]) && Covers(&policies[i], gr, nsLabels, objLabels) {
			out = append(out, &policies[i])
		}
	}
	return out
}

// Any says whether some policy for purpose covers the object (see Select).
func Any(policies []v1alpha1.ProtectionPolicy, purpose Purpose, gr schema.GroupResource, nsLabels, objLabels map[string]string) bool {
	for i := range policies {
		if purpose(&policies[i]) && Covers(&policies[i], gr, nsLabels, objLabels) {
			return true
		}
	}
	return false
}

// ForResource returns the policies for purpose that name gr, whatever
// their selectors: the ones worth matching objects of gr against.
func ForResource(policies []v1alpha1.ProtectionPolicy, purpose Purpose, gr schema.GroupResource) []*v1alpha1.ProtectionPolicy {
	var out []*v1alpha1.ProtectionPolicy
	for i := range policies {
		if purpose(&policies[i]) && CoversResource(&policies[i], gr) {
			out = append(out, &policies[i])
		}
	}
	return out
}
