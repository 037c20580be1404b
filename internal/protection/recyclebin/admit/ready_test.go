package admit

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready"
	"github.com/rampart-io/rampart/internal/protection/ready/readytest"
)

// A policy is Ready once its webhook is registered; with the recycle bin
// off it says so and how to turn it on.
func TestReadySaysWhetherDeletesAreKept(t *testing.T) {
	p := &v1alpha1.RecyclePolicy{ObjectMeta: metav1.ObjectMeta{Name: "configs", Generation: 1}, Spec: v1alpha1.RecyclePolicySpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}}}
	base := registration()
	base.RecycleBin = true
	empty := rampartadmission.ValidatingConfig(base)
	c := readytest.Client(t, p, empty)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "configs"}}
	condition := func(r *ready.Reconciler[v1alpha1.RecyclePolicy, *v1alpha1.RecyclePolicy]) *metav1.Condition {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.RecyclePolicy{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, "Ready")
	}
	off := base
	off.RecycleBin = false
	for installed, says := range map[installation.Method]string{
		installation.ByHand: "run the manager with --recycle-bin-dir",
		installation.Helm:   "set the chart's manager.recycleBin.enabled",
		installation.Up:     "start the cluster with rampart up",
	} {
		if got := condition(ready.New(c, func() rampartadmission.Registration { return off }, readiness(installed))); got == nil ||
			got.Status != metav1.ConditionFalse || got.Reason != RecycleBinOff || !strings.Contains(got.Message, says) {
			t.Errorf("with the recycle bin off, installed by %q: %+v, want a message saying %q", installed, got, says)
		}
	}
	r := ready.New(c, func() rampartadmission.Registration { return base }, readiness(installation.ByHand))
	if got := condition(r); got == nil || got.Status != metav1.ConditionFalse {
		t.Errorf("before its webhook is registered: %+v", got)
	}
	reg := base
	reg = reg.With(p)
	cfg := empty.DeepCopy()
	cfg.Webhooks = rampartadmission.ValidatingConfig(reg).Webhooks
	if err := c.Update(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if got := condition(r); got == nil || got.Status != metav1.ConditionTrue || got.Reason != "Keeping" ||
		got.Message != "webhook configs.recycle.rampart.io registered: each delete it selects is refused unless a copy is stored first" {
		t.Errorf("with its webhook registered: %+v", got)
	}
}

// registration is readytest's, with this protection in it.
func registration() rampartadmission.Registration {
	reg := readytest.Registration()
	reg.Protections = append(reg.Protections, &Plugin{})
	return reg
}
