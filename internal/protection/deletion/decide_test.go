package deletion

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecide(t *testing.T) {
	ns := schema.GroupResource{Resource: "namespaces"}
	deploy := schema.GroupResource{Group: "apps", Resource: "deployments"}
	cm := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name    string
		req     Request
		allowed bool
		// wantIn are fragments the denial message must contain: the rule,
		// the object, and the command that proceeds.
		wantIn []string
	}{
		{
			name:    "unlabelled namespace is allowed",
			req:     Request{Resource: ns, Name: "dev"},
			allowed: true,
		},
		{
			name:    "namespace labelled Always is denied with the unlabel command",
			req:     Request{Resource: ns, Name: "prod", Labels: map[string]string{"rampart.io/protection": "Always"}},
			allowed: false,
			wantIn:  []string{`namespace "prod"`, "rampart.io/protection=Always", "kubectl label namespace/prod rampart.io/protection-"},
		},
		{
			name:    "deployment labelled Always names its group and namespace",
			req:     Request{Resource: deploy, Namespace: "shop", Name: "web", Labels: map[string]string{"rampart.io/protection": "Always"}},
			allowed: false,
			wantIn:  []string{`deployments.apps "web" in namespace "shop"`, "kubectl label -n shop deployments.apps/web rampart.io/protection-"},
		},
		{
			name:    "configmap labelled Always",
			req:     Request{Resource: cm, Namespace: "default", Name: "settings", Labels: map[string]string{"rampart.io/protection": "Always"}},
			allowed: false,
			wantIn:  []string{`configmap "settings" in namespace "default"`, "kubectl label -n default configmap/settings rampart.io/protection-"},
		},
		{
			name:    "a value other than Always does not deny (case matters, like every label value)",
			req:     Request{Resource: ns, Name: "x", Labels: map[string]string{"rampart.io/protection": "always"}},
			allowed: true,
		},
		{
			name:    "other labels are irrelevant",
			req:     Request{Resource: ns, Name: "x", Labels: map[string]string{"team": "a"}},
			allowed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.req)
			if v.Allowed != tt.allowed {
				t.Fatalf("Allowed = %v, want %v (message %q)", v.Allowed, tt.allowed, v.Message)
			}
			if !v.Allowed && v.Rule != RuleAlways {
				t.Errorf("Rule = %q, want %q", v.Rule, RuleAlways)
			}
			for _, frag := range tt.wantIn {
				if !strings.Contains(v.Message, frag) {
					t.Errorf("message %q lacks %q", v.Message, frag)
				}
			}
		})
	}
}

func BenchmarkDecideAlways(b *testing.B) {
	r := Request{Resource: schema.GroupResource{Resource: "namespaces"}, Name: "prod",
		Labels: map[string]string{"rampart.io/protection": "Always", "team": "core"}}
	for b.Loop() {
		if Decide(r).Allowed {
			b.Fatal("allowed")
		}
	}
}
