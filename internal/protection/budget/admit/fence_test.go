package admit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// Disruptions waiting on the fence share its writes: 50 at once cost a
// few writes, not 50, and each returns only after the index has filed a
// write made after it arrived. Without the fence budget, Pass fails (the
// handler then lists live).
func TestFenceSharesWritesAndWaitsForTheIndex(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	x := budget.NewIndex()
	x.SetFence(budget.Key{Namespace: "rampart-system", Name: FenceName}, 0)
	var writes atomic.Int64
	var filed sync.WaitGroup
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := c.Patch(ctx, o, p, opts...); err != nil {
				return err
			}
			writes.Add(1)
			// The informer delivers the write a moment later.
			b := o.(*v1alpha1.PodUnavailableBudget).DeepCopy()
			filed.Add(1)
			go func() {
				defer filed.Done()
				time.Sleep(5 * time.Millisecond)
				x.SetBudget(b)
			}()
			return nil
		},
	}).Build()
	f := &Fence{Client: c, Index: x}
	ctx := context.Background()
	if err := f.Pass(ctx); err == nil {
		t.Fatal("Pass without the fence budget returned no error")
	}
	if err := EnsureFence(ctx, c, "rampart-system", nil); err != nil {
		t.Fatal(err)
	}
	if err := EnsureFence(ctx, c, "rampart-system", nil); err != nil {
		t.Fatalf("EnsureFence again: %v", err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.Pass(ctx); err != nil {
				failed.Add(1)
				t.Log(err)
			}
		}()
	}
	wg.Wait()
	filed.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of 50 passes failed", failed.Load())
	}
	if n := writes.Load(); n < 1 || n > 10 {
		t.Fatalf("50 concurrent passes made %d fence writes; want them shared (1 to 10)", n)
	}
	// One alone: its own write, filed before it returns.
	before := writes.Load()
	if err := f.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if writes.Load() != before+1 {
		t.Fatalf("a pass alone made %d writes, want 1", writes.Load()-before)
	}
	var got v1alpha1.PodUnavailableBudget
	if err := c.Get(ctx, client.ObjectKey{Namespace: "rampart-system", Name: FenceName}, &got); err != nil {
		t.Fatal(err)
	}
	now, cancel := context.WithCancel(ctx)
	cancel() // no waiting: filed already, or an error
	if err := x.WaitFence(now, got.ResourceVersion); err != nil {
		t.Fatalf("the index had not filed the last write when Pass returned: %v", err)
	}
}
