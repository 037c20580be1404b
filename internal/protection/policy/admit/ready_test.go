package admit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	admit "github.com/rampart-io/rampart/internal/protection/policy/admit"
	"github.com/rampart-io/rampart/internal/protection/ready"
	"github.com/rampart-io/rampart/internal/protection/ready/readytest"
)

func TestReadyFollowsTheRegisteredConfiguration(t *testing.T) {
	base := readytest.Registration()
	p := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Generation: 2}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		Protection: v1alpha1.ProtectionAlways}}
	c := readytest.Client(t, p)
	r := ready.New(c, func() rampartadmission.Registration { return base }, admit.Readiness(nil, nil))
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "ledger"}}
	ready := func() metav1.Condition {
		t.Helper()
		got := &v1alpha1.ProtectionPolicy{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ObservedGeneration != 2 {
			t.Errorf("observedGeneration %d, want 2", got.Status.ObservedGeneration)
		}
		return *meta.FindStatusCondition(got.Status.Conditions, "Ready")
	}

	// Nothing registered yet: Registering, looked at again in a second.
	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("reconcile = %v, %v", res, err)
	}
	if c := ready(); c.Status != metav1.ConditionFalse || c.Reason != "Registering" || !strings.Contains(c.Message, "ledger.deletion.policy.rampart.io") {
		t.Errorf("before registration: %+v", c)
	}

	reg := base
	reg = reg.With(p)
	if err := c.Create(context.Background(), rampartadmission.ValidatingConfig(reg)); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile = %v, %v", res, err)
	}
	if c := ready(); c.Status != metav1.ConditionTrue || c.Reason != "Enforced" ||
		c.Message != "webhook ledger.deletion.policy.rampart.io registered; enforced" {
		t.Errorf("after registration: %+v", c)
	}
}

type compiledState struct {
	names   []string
	inForce bool
	left    []compiled.Left
}

func (c *compiledState) PolicyState(context.Context, *v1alpha1.ProtectionPolicy) (rampartadmission.StaticRules, error) {
	return rampartadmission.StaticRules{Names: c.names, InForce: c.inForce, Left: c.left}, nil
}

// The Ready condition says which engine enforces the policy: its webhook
// from the start, and the API server itself once every API server has
// loaded the compiled static rules; until then it is looked at again.
func TestReadySaysWhichEngineEnforces(t *testing.T) {
	base := readytest.Registration()
	p := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Generation: 1}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		Protection: v1alpha1.ProtectionAlways}}
	reg := base
	reg = reg.With(p)
	c := readytest.Client(t, p, rampartadmission.ValidatingConfig(reg))
	state := &compiledState{names: []string{"ledger.deletion.policy.rampart.io"}}
	r := ready.New(c, func() rampartadmission.Registration { return base }, admit.Readiness(state, nil))
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "ledger"}}
	message := func() string {
		t.Helper()
		got := &v1alpha1.ProtectionPolicy{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		if cond == nil || cond.Status != metav1.ConditionTrue {
			t.Fatalf("Ready = %+v, want True: the webhook enforces the policy whatever the compiled policy's state", cond)
		}
		return cond.Message
	}

	if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != admit.CompiledWait {
		t.Fatalf("reconcile while loading = %v, %v; want a look again in %v", res, err, admit.CompiledWait)
	}
	if m := message(); m != "webhook ledger.deletion.policy.rampart.io registered; enforced; compiling its static rules to ValidatingAdmissionPolicy ledger.deletion.policy.rampart.io (not loaded by every API server yet)" {
		t.Errorf("while the API servers load it: %q", m)
	}
	state.inForce = true
	if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile in force = %v, %v", res, err)
	}
	if m := message(); m != "webhook ledger.deletion.policy.rampart.io registered; enforced; its static rules also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy ledger.deletion.policy.rampart.io)" {
		t.Errorf("in force: %q", m)
	}
	state.names = nil
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if m := message(); m != "webhook ledger.deletion.policy.rampart.io registered; enforced" {
		t.Errorf("nothing compiled: %q", m)
	}

	// A static rule left to the webhook for its compiled name: the
	// condition says so, with the keeper's reason and fix, and is looked
	// at again (another policy may free the name).
	why := `ProtectionPolicy "ledger.replicas.w.x" already compiles to a policy named "x"; rename one of the two ProtectionPolicies (names without dots never clash)`
	state.names, state.inForce, state.left = []string{"ledger.deletion.policy.rampart.io"}, true, []compiled.Left{{Policy: "ledger", Name: "x", Why: why}}
	if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != admit.LeftWait {
		t.Fatalf("reconcile with a rule left to the webhook = %v, %v; want a look again in %v", res, err, admit.LeftWait)
	}
	if m := message(); !strings.HasSuffix(m, "(ValidatingAdmissionPolicy ledger.deletion.policy.rampart.io); some static rules left to its webhooks, so not enforced while Rampart is down: "+why) {
		t.Errorf("a rule left to the webhook: %q", m)
	}
}

// A CRD coming or going looks again at the policies guarding replicas
// (their compiled rules follow the CRDs' scale subresources), not at the
// others.
func TestACRDChangeLooksAgainAtGuardingPolicies(t *testing.T) {
	guards := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:        []v1alpha1.ResourceRule{{APIGroups: []string{"example.com"}, Resources: []string{"*"}}},
		ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardToZero}}}
	protects := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		Protection: v1alpha1.ProtectionAlways}}
	got := admit.Guarding(context.Background(), readytest.Client(t, guards, protects))
	if len(got) != 1 || got[0].Name != "fleet" {
		t.Errorf("looked at again after a CRD change: %v, want policy fleet alone", got)
	}
}
