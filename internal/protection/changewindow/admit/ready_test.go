package admit

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready"
	"github.com/rampart-io/rampart/internal/protection/ready/readytest"
)

// The status says whether the window is open and when it next changes,
// requeues at that change, and turns Ready once the webhook is registered.
func TestStatusFollowsTheScheduleAndTheRegistration(t *testing.T) {
	// Monday 03:30 UTC, inside a 02:00-04:00 window.
	now := time.Date(2026, 11, 23, 3, 30, 0, 0, time.UTC)
	cw := &v1alpha1.ChangeWindow{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly", Generation: 1}, Spec: v1alpha1.ChangeWindowSpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}},
		TimeZone:  "UTC",
		Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Mon"}, Start: "02:00", End: "04:00"}}}}
	c := readytest.Client(t, cw)
	base := registration()
	r := ready.New(c, func() rampartadmission.Registration { return base }, readiness)
	r.Now = func() time.Time { return now }
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "nightly"}}
	get := func() *v1alpha1.ChangeWindow {
		got := &v1alpha1.ChangeWindow{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != time.Second {
		t.Fatalf("unregistered: reconcile = %v, %v", res, err)
	}
	got := get()
	if !got.Status.Open || got.Status.NextClose == nil || !got.Status.NextClose.Time.Equal(now.Add(30*time.Minute)) {
		t.Errorf("status %+v, want open until 04:00", got.Status)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, "Ready"); c == nil || c.Reason != "Registering" {
		t.Errorf("Ready before registration: %+v", c)
	}

	reg := base
	reg = reg.With(cw)
	if err := c.Create(context.Background(), rampartadmission.ValidatingConfig(reg)); err != nil {
		t.Fatal(err)
	}
	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter != 30*time.Minute+time.Second {
		t.Fatalf("registered: reconcile = %v, %v; want a requeue just after the close", res, err)
	}
	if c := meta.FindStatusCondition(get().Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue ||
		c.Message != "webhook nightly.shop.window.rampart.io registered" {
		t.Errorf("Ready after registration: %+v", c)
	}
}

// A window whose schedule does not compile is not Ready, says why without
// waiting for a webhook, and is looked at again within the hour; looked
// at again unchanged, its status is not written again.
func TestAnInvalidWindowSaysWhy(t *testing.T) {
	cw := &v1alpha1.ChangeWindow{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "mars", Generation: 4}, Spec: v1alpha1.ChangeWindowSpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}},
		TimeZone:  "Mars/Olympus",
		Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Mon"}, Start: "02:00", End: "04:00"}}}}
	c := readytest.Client(t, cw)
	r := ready.New(c, registration, readiness)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "mars"}}
	get := func() *v1alpha1.ChangeWindow {
		t.Helper()
		if res, err := r.Reconcile(context.Background(), req); err != nil || res.RequeueAfter != time.Hour {
			t.Fatalf("reconcile = %v, %v; want a look again in an hour", res, err)
		}
		got := &v1alpha1.ChangeWindow{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := get()
	if c := meta.FindStatusCondition(first.Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Invalid" ||
		c.Message != `unknown time zone "Mars/Olympus"` || c.ObservedGeneration != 4 || first.Status.ObservedGeneration != 4 {
		t.Errorf("Ready of an invalid window: %+v (observedGeneration %d)", c, first.Status.ObservedGeneration)
	}
	if again := get(); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("status written again with nothing changed: resourceVersion %s, then %s", first.ResourceVersion, again.ResourceVersion)
	}
}

// registration is readytest's, with this protection in it.
func registration() rampartadmission.Registration {
	reg := readytest.Registration()
	reg.Protections = append(reg.Protections, &Plugin{})
	return reg
}
