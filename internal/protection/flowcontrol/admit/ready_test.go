package admit

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready"
	"github.com/rampart-io/rampart/internal/protection/ready/readytest"
)

// A flow control changed since it was registered is not Ready until its
// webhook is registered as the new spec makes it.
func TestReadyWaitsForTheCurrentSpec(t *testing.T) {
	f := &v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "pods", Generation: 1}, Spec: v1alpha1.DeletionFlowControlSpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}}
	base := readytest.Registration()
	base.Protections = []rampartadmission.Protection{&Plugin{}}
	reg := base
	reg = reg.With(f)
	cfg := rampartadmission.ValidatingConfig(reg)
	changed := f.DeepCopy()
	changed.Generation = 2
	changed.Spec.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "batch"}}
	c := readytest.Client(t, changed, cfg)
	r := ready.New(c, func() rampartadmission.Registration { return base }, readiness)
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

func TestDecideFollowsEveryOwnedWebhook(t *testing.T) {
	reg := rampartadmission.Registration{Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1,
		Replicas: []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}}, OwnNamespace: "rampart-system",
		Protections: []rampartadmission.Protection{&Plugin{}}}
	reg = reg.With(&v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Spec: v1alpha1.DeletionFlowControlSpec{Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}})
	want := rampartadmission.OwnedWebhooks(reg, Owner("pods"))
	if len(want) != 2 || want[0].Name != "r0.pods.flowcontrol.rampart.io" || want[1].Name != "r1.pods.flowcontrol.rampart.io" {
		t.Fatalf("owned webhooks %v, want the flow control's, once per replica", want)
	}
	live := rampartadmission.ValidatingConfig(reg).Webhooks

	c := ready.Decide(live, want, 3, "Counting", ": deletes are counted")
	if c.Status != metav1.ConditionTrue || c.Reason != "Counting" || c.ObservedGeneration != 3 ||
		c.Message != "webhooks r0.pods.flowcontrol.rampart.io, r1.pods.flowcontrol.rampart.io registered: deletes are counted" {
		t.Errorf("registered: %+v", c)
	}
	// One replica's copy missing, or registered with another reach: not yet.
	var missing []admissionregistrationv1.ValidatingWebhook
	for _, h := range live {
		if h.Name != want[1].Name {
			missing = append(missing, h)
		}
	}
	c = ready.Decide(missing, want, 3, "Counting", "")
	if c.Status != metav1.ConditionFalse || c.Reason != ready.Registering {
		t.Errorf("a copy missing: %+v", c)
	}
	stale := append([]admissionregistrationv1.ValidatingWebhook(nil), live...)
	for i := range stale {
		if stale[i].Name == want[1].Name {
			stale[i] = *stale[i].DeepCopy()
			stale[i].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"old": "spec"}}
		}
	}
	if c := ready.Decide(stale, want, 3, "Counting", ""); c.Status != metav1.ConditionFalse {
		t.Errorf("a copy with the old spec's selector: %+v", c)
	}
}
