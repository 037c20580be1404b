package ready

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/ready/readytest"
)

// A flow control changed since it was registered is not Ready until its
// webhook is registered as the new spec makes it.
func TestReadyWaitsForTheCurrentSpec(t *testing.T) {
	f := &v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "pods", Generation: 1}, Spec: v1alpha1.DeletionFlowControlSpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}}
	base := readytest.Registration()
	reg := base
	reg = reg.With(f)
	cfg := rampartadmission.ValidatingConfig(reg)
	changed := f.DeepCopy()
	changed.Generation = 2
	changed.Spec.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "batch"}}
	c := readytest.Client(t, changed, cfg)
	r := New(c, func() rampartadmission.Registration { return base }, FlowControls)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "pods"}}
	ready := func() *metav1.Condition {
		got := &v1alpha1.DeletionFlowControl{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, "Ready")
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if c := ready(); c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != 2 {
		t.Errorf("with the old spec registered: %+v", c)
	}
	reg = reg.With(changed)
	cfg.Webhooks = rampartadmission.ValidatingConfig(reg).Webhooks
	if err := c.Update(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if c := ready(); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Counting" ||
		// With an objectSelector, evictions have a webhook of their own.
		c.Message != "webhooks pods.flowcontrol.rampart.io, pods.flowcontrol-evictions.rampart.io registered: deletes are counted" {
		t.Errorf("with the new spec registered: %+v", c)
	}
}
