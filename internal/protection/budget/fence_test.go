package budget

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// The fence is never filed as a budget; waiting on it returns once the
// index has filed it at the resourceVersion asked or later, and an older
// or repeated event does not move it back.
func TestFenceOrdersTheIndex(t *testing.T) {
	x := NewIndex()
	x.SetFence(Key{"rampart-system", "rampart-fence"}, 0)
	if x.FenceAbove() != DefaultFenceAbove {
		t.Fatalf("FenceAbove unset = %d, want the default %d", x.FenceAbove(), DefaultFenceAbove)
	}
	fence := func(rv string) *v1alpha1.PodUnavailableBudget {
		return &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "rampart-system", Name: "rampart-fence", ResourceVersion: rv},
			Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{}}}
	}
	if x.SetBudget(fence("100")) || x.HasBudgets("rampart-system") || x.Count("rampart-system") != 0 {
		t.Fatal("the fence was filed as a budget")
	}
	x.DeleteBudget(Key{"rampart-system", "rampart-fence"}) // ignored
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := x.WaitFence(ctx, "99"); err != nil {
		t.Fatalf("waiting for an older resourceVersion than the one filed: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- x.WaitFence(ctx, "120") }()
	x.SetBudget(fence("110"))
	select {
	case err := <-done:
		t.Fatalf("returned (%v) before the fence was filed at 120", err)
	case <-time.After(50 * time.Millisecond):
	}
	x.SetBudget(fence("1000")) // longer, so later: resourceVersions compare as integers
	if err := <-done; err != nil {
		t.Fatalf("the fence filed at 1000: %v", err)
	}
	x.SetBudget(fence("200")) // a replayed older event
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := x.WaitFence(short, "999"); err != nil {
		t.Fatalf("an older event moved the fence back: %v", err)
	}
	if err := x.WaitFence(short, "1001"); err == nil {
		t.Fatal("waiting for a fence never filed returned no error")
	}
}

// A targetRef budget whose selector is not resolved is not filed, but a
// reader after the fence learns of it (and reads it live); it leaves that
// list once resolved or deleted.
func TestIndexNamesUnresolvedBudgets(t *testing.T) {
	x := NewIndex()
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1alpha1.PodUnavailableBudgetSpec{TargetRef: &v1alpha1.TargetReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}}
	x.SetBudget(b)
	if keys, unresolved := x.CoveringUnresolved("shop", map[string]string{"app": "web"}); len(keys) != 0 || len(unresolved) != 1 || unresolved[0] != "web" {
		t.Fatalf("unresolved budget: keys %v, unresolved %v; want none and [web]", keys, unresolved)
	}
	if x.Count("shop") != 1 {
		t.Fatalf("Count = %d, want 1", x.Count("shop"))
	}
	b = b.DeepCopy()
	b.Status.Selector = "app=web"
	x.SetBudget(b)
	if keys, unresolved := x.CoveringUnresolved("shop", map[string]string{"app": "web"}); len(keys) != 1 || len(unresolved) != 0 {
		t.Fatalf("resolved budget: keys %v, unresolved %v; want [shop/web] and none", keys, unresolved)
	}
	// Its target changed: the selector written is for the old spec.
	b = b.DeepCopy()
	b.Generation, b.Status.ObservedGeneration = 2, 1
	x.SetBudget(b)
	if keys, unresolved := x.CoveringUnresolved("shop", map[string]string{"app": "web"}); len(keys) != 0 || len(unresolved) != 1 {
		t.Fatalf("budget whose target changed: keys %v, unresolved %v; want none and [web]", keys, unresolved)
	}
	x.DeleteBudget(Key{"shop", "web"})
	if keys, unresolved := x.CoveringUnresolved("shop", map[string]string{"app": "web"}); len(keys) != 0 || len(unresolved) != 0 || x.Count("shop") != 0 {
		t.Fatalf("deleted budget: keys %v, unresolved %v, count %d", keys, unresolved, x.Count("shop"))
	}
}
