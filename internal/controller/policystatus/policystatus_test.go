package policystatus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
)

func TestReadyFollowsTheRegisteredConfiguration(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	base := rampartadmission.Registration{Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}
	p := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Generation: 2}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		Protection: v1alpha1.ProtectionAlways}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(p).WithStatusSubresource(p).Build()
	r := &Reconciler{Client: c, Registration: func() rampartadmission.Registration { return base }}
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
	reg.Policies = []v1alpha1.ProtectionPolicy{*p}
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
