package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestCovers(t *testing.T) {
	p := &v1alpha1.ProtectionPolicy{Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}},
		ObjectSelector:    &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	}}
	deploy := schema.GroupResource{Group: "apps", Resource: "deployments"}
	critical := map[string]string{"tier": "critical"}
	for _, tt := range []struct {
		name    string
		gr      schema.GroupResource
		ns, obj map[string]string
		want    bool
	}{
		{"deployment in a critical namespace", deploy, critical, nil, true},
		{"deployment elsewhere", deploy, map[string]string{"tier": "batch"}, nil, false},
		{"excluded by the object selector", deploy, critical, map[string]string{"canary": "yes"}, false},
		{"another resource", schema.GroupResource{Group: "apps", Resource: "daemonsets"}, critical, nil, false},
		{"same resource name, other group", schema.GroupResource{Group: "extensions", Resource: "deployments"}, critical, nil, false},
	} {
		if got := Covers(p, tt.gr, tt.ns, tt.obj); got != tt.want {
			t.Errorf("%s: Covers = %v, want %v", tt.name, got, tt.want)
		}
	}
	wild := &v1alpha1.ProtectionPolicy{Spec: v1alpha1.ProtectionPolicySpec{Resources: []v1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}}}}
	if !Covers(wild, schema.GroupResource{Group: "example.com", Resource: "widgets"}, nil, nil) {
		t.Error("a */* policy with no selectors covers everything")
	}
}

func TestGuard(t *testing.T) {
	p := &v1alpha1.ProtectionPolicy{}
	if Guard(p) != "" {
		t.Error("no explicitReplicas, no guard")
	}
	p.Spec.ExplicitReplicas = &v1alpha1.ExplicitReplicas{}
	if Guard(p) != v1alpha1.GuardAll {
		t.Error("an empty guard defaults to All")
	}
}
