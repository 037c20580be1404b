package replicas

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
)

// TestDecide is the replica decision table. Each row also runs through
// the compiled policies, evaluated with kube-apiserver's own libraries
// (agreeCompiled): a write through the scale subresource must be left to
// the webhook by them. A guard other than All comes from a policy (the
// label guards every change), so such rows name one. The rows on a custom
// resource (widget) run through its CRD's compiled policy, which reads the
// replicas at the CRD's specReplicasPath (.spec.size).
func TestDecide(t *testing.T) {
	web := protection.Object{Resource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespace: "shop", Name: "web"}
	widget := protection.Object{Resource: schema.GroupResource{Group: "example.com", Resource: "widgets"}, Namespace: "shop", Name: "w"}
	all, dec, zero := v1alpha1.GuardAll, v1alpha1.GuardDecrease, v1alpha1.GuardToZero
	noZero, noShrink := protection.Source{Policy: "no-zero"}, protection.Source{Policy: "no-shrink"}
	tests := []struct {
		name    string
		req     Request
		allowed bool
		wantIn  []string
	}{
		{name: "unguarded object", req: Request{Object: web, Old: 3, New: 0}, allowed: true},
		{name: "no change of replicas", req: Request{Object: web, Guard: all, Old: 3, New: 3}, allowed: true},
		{
			name: "a change without confirmation is denied with the command that works",
			req:  Request{Object: web, Guard: all, Old: 3, New: 0},
			wantIn: []string{`deployments.apps "web" in namespace "shop"`, "from 3 to 0",
				`rampart.io/confirm-replicas="0"`, "kubectl rampart scale -n shop deployments.apps/web --replicas 0",
				"kubectl label -n shop deployments.apps/web rampart.io/explicit-replicas-"},
		},
		{name: "a confirmed change passes", req: Request{Object: web, Guard: all, Old: 3, New: 5, Confirm: "5"}, allowed: true},
		{
			name:   "a confirmation of another count is denied",
			req:    Request{Object: web, Guard: all, Old: 3, New: 30, Confirm: "3"},
			wantIn: []string{`confirms rampart.io/confirm-replicas="3"`, "not the new count 30"},
		},
		{
			name:   "the scale subresource is denied even when the object carries a stale confirmation",
			req:    Request{Object: web, Guard: all, Old: 3, New: 0, Confirm: "0", Scale: true},
			wantIn: []string{"scale subresource", "kubectl rampart scale -n shop deployments.apps/web --replicas 0"},
		},
		{name: "an exempt requester passes through the scale subresource", req: Request{Object: web, Guard: all, Old: 3, New: 10, Scale: true, Exempt: true}, allowed: true},
		{name: "Decrease lets increases through", req: Request{Object: web, Guard: dec, Old: 3, New: 6, Scale: true, Source: noShrink}, allowed: true},
		{name: "Decrease guards decreases", req: Request{Object: web, Guard: dec, Old: 3, New: 2, Scale: true, Source: noShrink}, wantIn: []string{"guard Decrease"}},
		{name: "Decrease guards decreases of the object too", req: Request{Object: web, Guard: dec, Old: 3, New: 2, Source: noShrink}, wantIn: []string{"guard Decrease"}},
		{name: "Decrease: a confirmed decrease passes", req: Request{Object: web, Guard: dec, Old: 3, New: 2, Confirm: "2", Source: noShrink}, allowed: true},
		{name: "a policy's exempt requester passes", req: Request{Object: web, Guard: all, Old: 3, New: 0, Exempt: true, Source: noShrink}, allowed: true},
		{name: "the label's exempt requester passes", req: Request{Object: web, Guard: all, Old: 3, New: 0, Exempt: true}, allowed: true},
		{name: "ToZero lets 3 -> 1 through", req: Request{Object: web, Guard: zero, Old: 3, New: 1, Source: noZero}, allowed: true},
		{name: "ToZero guards 3 -> 0", req: Request{Object: web, Guard: zero, Old: 3, New: 0, Source: noZero}, wantIn: []string{"guard ToZero"}},
		{
			name:   "a policy source says how to lift it",
			req:    Request{Object: web, Guard: all, Old: 3, New: 0, Source: protection.Source{Policy: "critical"}},
			wantIn: []string{`ProtectionPolicy "critical"`, "kubectl edit protectionpolicy critical"},
		},
		// A custom resource with a scale subresource.
		{
			name: "custom resource: a change without confirmation is denied with the command that works",
			req:  Request{Object: widget, Guard: all, Old: 3, New: 0},
			wantIn: []string{`widgets.example.com "w" in namespace "shop"`, "from 3 to 0", `rampart.io/confirm-replicas="0"`,
				"kubectl rampart scale -n shop widgets.example.com/w --replicas 0", "kubectl label -n shop widgets.example.com/w rampart.io/explicit-replicas-"},
		},
		{name: "custom resource: a confirmed change passes", req: Request{Object: widget, Guard: all, Old: 3, New: 5, Confirm: "5"}, allowed: true},
		{name: "custom resource: no change", req: Request{Object: widget, Guard: all, Old: 2, New: 2}, allowed: true},
		{
			name:   "custom resource: a confirmation of another count is denied",
			req:    Request{Object: widget, Guard: all, Old: 3, New: 30, Confirm: "3"},
			wantIn: []string{`confirms rampart.io/confirm-replicas="3"`, "not the new count 30"},
		},
		{name: "custom resource: the label's exempt requester passes", req: Request{Object: widget, Guard: all, Old: 3, New: 0, Exempt: true}, allowed: true},
		{name: "custom resource: the scale subresource", req: Request{Object: widget, Guard: all, Old: 3, New: 0, Scale: true}, wantIn: []string{"scale subresource"}},
		{name: "custom resource: Decrease guards decreases", req: Request{Object: widget, Guard: dec, Old: 3, New: 2, Source: noShrink}, wantIn: []string{"guard Decrease", `ProtectionPolicy "no-shrink"`}},
		{name: "custom resource: Decrease lets increases through", req: Request{Object: widget, Guard: dec, Old: 3, New: 4, Source: noShrink}, allowed: true},
		{name: "custom resource: Decrease, confirmed", req: Request{Object: widget, Guard: dec, Old: 3, New: 2, Confirm: "2", Source: noShrink}, allowed: true},
		{name: "custom resource: ToZero guards 1 -> 0", req: Request{Object: widget, Guard: zero, Old: 1, New: 0, Source: noZero}, wantIn: []string{"guard ToZero"}},
		{name: "custom resource: ToZero lets 0 -> 1 through", req: Request{Object: widget, Guard: zero, Old: 0, New: 1, Source: noZero}, allowed: true},
		{name: "custom resource: a policy's exempt requester passes", req: Request{Object: widget, Guard: all, Old: 3, New: 0, Exempt: true, Source: noShrink}, allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.req)
			if v.Allowed != tt.allowed {
				t.Fatalf("Allowed = %v, want %v (%q)", v.Allowed, tt.allowed, v.Message)
			}
			if !v.Allowed && v.Reason != RuleExplicitReplicas {
				t.Errorf("Reason = %q", v.Reason)
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(v.Message, w) {
					t.Errorf("message %q lacks %q", v.Message, w)
				}
			}
			// One meaning, two engines: the compiled policies
			// (rampart export policies, the manager's hybrid mode)
			// answer each row as Decide does.
			agreeCompiled(t, tt.req, v)
		})
	}
}

func BenchmarkDecideDenied(b *testing.B) {
	r := Request{Object: protection.Object{Resource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespace: "shop", Name: "web"},
		Guard: v1alpha1.GuardAll, Old: 3, New: 0}
	for b.Loop() {
		if Decide(r).Allowed {
			b.Fatal("allowed")
		}
	}
}
