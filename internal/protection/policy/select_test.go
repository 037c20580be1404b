package policy

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestSelect(t *testing.T) {
	deploy := schema.GroupResource{Group: "apps", Resource: "deployments"}
	apps := []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}
	policies := []v1alpha1.ProtectionPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "keep"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: apps, Protection: v1alpha1.ProtectionCascading}},
		{ObjectMeta: metav1.ObjectMeta{Name: "replicas"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: apps, ExplicitReplicas: &v1alpha1.ExplicitReplicas{}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "shop-only"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: apps, Protection: v1alpha1.ProtectionCascading,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "shop"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "tier"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: apps, ExplicitReplicas: &v1alpha1.ExplicitReplicas{},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}}},
	}
	for _, tt := range []struct {
		name     string
		purpose  Purpose
		gr       schema.GroupResource
		nsLabels map[string]string
		labels   map[string]string
		want     []string
	}{
		{"protecting, namespace shop", Protecting, deploy, NamespaceLabels("shop", nil, false), nil, []string{"keep", "shop-only"}},
		{"protecting, namespace other", Protecting, deploy, NamespaceLabels("other", map[string]string{"a": "b"}, true), nil, []string{"keep"}},
		{"guarding, no tier label", Guarding, deploy, NamespaceLabels("shop", nil, false), nil, []string{"replicas"}},
		{"guarding, tier db", Guarding, deploy, NamespaceLabels("shop", nil, false), map[string]string{"tier": "db"}, []string{"replicas", "tier"}},
		{"cluster-scoped: namespaceSelector ignored", Protecting, deploy, nil, nil, []string{"keep", "shop-only"}},
		{"another resource", Protecting, schema.GroupResource{Resource: "pods"}, map[string]string{}, nil, nil},
	} {
		var got []string
		for _, p := range Select(policies, tt.purpose, tt.gr, tt.nsLabels, tt.labels) {
			got = append(got, p.Name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Select = %v, want %v", tt.name, got, tt.want)
		}
		if found := Any(policies, tt.purpose, tt.gr, tt.nsLabels, tt.labels); found != (len(tt.want) > 0) {
			t.Errorf("%s: Any = %v, want %v", tt.name, found, len(tt.want) > 0)
		}
	}
	if got := ForResource(policies, Guarding, deploy); len(got) != 2 || got[0].Name != "replicas" || got[1].Name != "tier" {
		t.Errorf("ForResource(Guarding, deployments) = %v, want replicas and tier", got)
	}
	if got := ForResource(policies, Protecting, schema.GroupResource{Resource: "pods"}); len(got) != 0 {
		t.Errorf("ForResource(Protecting, pods) = %v, want none", got)
	}
}

func TestNamespaceLabels(t *testing.T) {
	for _, tt := range []struct {
		name   string
		labels map[string]string
		known  bool
		want   map[string]string
	}{
		{"known namespace keeps its labels", map[string]string{"tier": "critical"}, true, map[string]string{"tier": "critical"}},
		{"unknown namespace gets its name label", nil, false, map[string]string{"kubernetes.io/metadata.name": "shop"}},
		{"known without labels gets its name label", nil, true, map[string]string{"kubernetes.io/metadata.name": "shop"}},
	} {
		got := NamespaceLabels("shop", tt.labels, tt.known)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
	}
}
