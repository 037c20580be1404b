package budget

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// A fence is how a reader of the index knows it is as current as the API
// server: a write to one budget, the fence, whose event the index files
// in order with every other budget's (one watch, ordered by
// resourceVersion). Once the index has filed the fence at the
// resourceVersion a write returned, it has filed every budget change the
// API server accepted before that write. No informer or library offers
// this (controller-runtime's cache has no "wait until current"), so it
// is written here: the write is Fence's in the admit package.

// FenceLabel marks the fence budget; it covers no pod and is never filed.
const FenceLabel = "rampart.io/fence"

// SetFence names the fence budget, and the number of budgets in a
// namespace from which a reader goes through it (see FenceAbove). Call it
// before the index is fed.
func (x *Index) SetFence(k Key, above int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fence, x.fenceAbove = k, above
}

// Fence is the fence budget's key; its Name is "" when there is none.
func (x *Index) Fence() Key {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.fence
}

// DefaultFenceAbove is the number of budgets in a namespace from which a
// disruption there reads the index through the fence rather than listing
// the namespace's budgets live. The list costs about 0.03 ms a budget;
// the fence a write, and with it the wait of the API server's next
// consistent read (the eviction's own list of PodDisruptionBudgets) for
// its watch cache's progress tick, up to 100 ms: below about a thousand
// budgets the list is the cheaper (BenchmarkEvictionWithManyBudgets,
// docs/budgets.md).
const DefaultFenceAbove = 1000

// FenceAbove is the number of budgets in a namespace from which its
// readers go through the fence (DefaultFenceAbove unless set).
func (x *Index) FenceAbove() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.fenceAbove > 0 {
		return x.fenceAbove
	}
	return DefaultFenceAbove
}

// IsFence says whether the budget ns/name is the fence.
func (x *Index) IsFence(ns, name string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.fence.Name != "" && x.fence == Key{ns, name}
}

func (x *Index) sawFence(rv string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if c, err := resourceversion.CompareResourceVersion(rv, x.fenceRV); x.fenceRV != "" && (err != nil || c <= 0) {
		return
	}
	x.fenceRV = rv
	close(x.fenced)
	x.fenced = make(chan struct{})
}

// WaitFence returns once the index has filed the fence at resourceVersion
// rv or later: every budget change accepted before the fence's write at rv
// is filed then.
func (x *Index) WaitFence(ctx context.Context, rv string) error {
	return waitFiled(ctx, rv, "the fence", func() (string, chan struct{}) {
		x.mu.RLock()
		defer x.mu.RUnlock()
		return x.fenceRV, x.fenced
	})
}

// waitFiled returns once filed says the index has filed what at
// resourceVersion rv or later; filed also returns a channel closed when
// that may have changed.
func waitFiled(ctx context.Context, rv, what string, filed func() (string, chan struct{})) error {
	for {
		seen, next := filed()
		if seen != "" {
			c, err := resourceversion.CompareResourceVersion(seen, rv)
			if err != nil {
				return fmt.Errorf("comparing the resourceVersions of %s: %w", what, err)
			}
			if c >= 0 {
				return nil
			}
		}
		select {
		case <-next:
		case <-ctx.Done():
			return fmt.Errorf("the budget index has not filed %s at resourceVersion %s (filed: %q): %w", what, rv, seen, ctx.Err())
		}
	}
}
