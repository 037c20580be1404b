package drill_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/drill"
)

// checkStatefulMaintenance: what the budgets promise beyond the loss. The
// grouped budgets keep at most their cap of jobs broken, refuse the
// runaway with the way to proceed, and let the drain finish within the
// drill's time; at full scale, one budget over the whole store, under the
// same runaway, leaves pods on the drained nodes at the end of that time
// or takes at least twice as long.
func checkStatefulMaintenance(t *testing.T, r drill.Result) {
	t.Helper()
	m := r.Protected.Measured
	if m["most_jobs_broken_at_once"] > 1 {
		t.Errorf("stateful-maintenance: %g jobs broken at once under a gang budget of 1", m["most_jobs_broken_at_once"])
	}
	if m["pods_left_on_drained"] > 0 {
		t.Errorf("stateful-maintenance: the drain under the grouped budgets left %g pods after %gs", m["pods_left_on_drained"], m["drain_seconds"])
	}
	if d := r.Protected.Denied; !strings.Contains(d, "kubectl rampart pub status") {
		t.Errorf("stateful-maintenance: the runaway was not refused with the way to proceed: %q (%g deleted, %g refused)", d, m["runaway_deletes"], m["runaway_refused"])
	}
	// The whole-store comparison runs at full scale only (rampart drill).
	if _, ran := m["whole_store_budget_drain_seconds"]; !ran {
		return
	}
	if left, whole, grouped := m["whole_store_budget_store_pods_left_on_drained"], m["whole_store_budget_drain_seconds"], m["drain_seconds"]; left == 0 && whole < 2*grouped {
		t.Errorf("stateful-maintenance: under one budget over the whole store the drain took %gs, under the grouped budgets %gs: the shape does not matter here", whole, grouped)
	}
}

// runOneDrill runs the drill named on both targets, its progress logged.
func runOneDrill(t *testing.T, name string, unprotected, protected drill.Target) drill.Result {
	t.Helper()
	d, _, err := drill.Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	results, err := drill.Run(context.Background(), d, unprotected, protected, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	return results[0]
}
