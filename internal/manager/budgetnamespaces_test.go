package manager

import (
	"slices"
	"testing"
	"time"
)

// Which namespaces the budget webhooks reach: a replica adds what its index
// holds and what is pinned, and keeps whatever is registered; only the
// leader lets a namespace go, after the grace without budgets.
func TestBudgetNamespacePlan(t *testing.T) {
	now := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	old := now.Add(-budgetNamespaceGrace)
	for _, c := range []struct {
		name                string
		indexed, registered []string
		pins, emptySince    map[string]time.Time
		leader              bool
		keep, mayDrop       []string
	}{
		{name: "indexed namespaces join", indexed: []string{"a", "b"}, keep: []string{"a", "b"}},
		{name: "a pin joins before its budget is stored", pins: map[string]time.Time{"new": now}, keep: []string{"new"}},
		{name: "an expired pin does not", pins: map[string]time.Time{"new": now.Add(-budgetPinTTL)}},
		{name: "a replica that is not leader keeps what another registered", registered: []string{"other"},
			emptySince: map[string]time.Time{"other": old}, keep: []string{"other"}},
		{name: "the leader keeps a namespace empty for less than the grace", registered: []string{"x"}, leader: true,
			emptySince: map[string]time.Time{"x": now.Add(-time.Second)}, keep: []string{"x"}},
		{name: "the leader may drop one empty for the grace", registered: []string{"x", "y"}, indexed: []string{"y"}, leader: true,
			emptySince: map[string]time.Time{"x": old}, keep: []string{"y"}, mayDrop: []string{"x"}},
		{name: "a pinned namespace is never dropped", registered: []string{"x"}, leader: true,
			pins: map[string]time.Time{"x": now}, emptySince: map[string]time.Time{"x": old}, keep: []string{"x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			keep, mayDrop := budgetNamespacePlan(c.indexed, c.registered, c.pins, c.emptySince, c.leader, now)
			if !slices.Equal(keep, c.keep) || !slices.Equal(mayDrop, c.mayDrop) {
				t.Fatalf("keep %v, may drop %v; want %v, %v", keep, mayDrop, c.keep, c.mayDrop)
			}
		})
	}
}

// A registration iteration confirms a pin only if it began after the pin.
func TestBudgetNamespacePinNeedsALaterIteration(t *testing.T) {
	b := newBudgetNamespaces()
	n, _ := b.begin(time.Now())
	after, _ := b.pin("shop", time.Now())
	b.end(n, []string{"shop"}) // began before the pin
	if ok, _ := b.check("shop", after); ok {
		t.Fatal("an iteration begun before the pin confirmed it")
	}
	n, pins := b.begin(time.Now())
	if _, ok := pins["shop"]; !ok {
		t.Fatal("the next iteration does not write the pin")
	}
	b.end(n, []string{"shop"})
	if ok, _ := b.check("shop", after); !ok {
		t.Fatal("an iteration begun after the pin did not confirm it")
	}
}
