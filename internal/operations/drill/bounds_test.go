package drill_test

import (
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/drill"
)

// TestOverBoundsNamesAFigurePastItsBound: rampart drill fails on a
// protected figure past the bound measured beside it, not only on loss.
func TestOverBoundsNamesAFigurePastItsBound(t *testing.T) {
	r := drill.Result{Drill: "list-storm-routed", Protected: drill.Loss{Measured: map[string]float64{
		"other_apiservers_rss_rise_percent": 12.5, "other_apiservers_rss_rise_bound_pct": 10,
		"business_p99_ms": 900,
	}}}
	over := r.OverBounds()
	if len(over) != 1 || !strings.Contains(over[0], "other_apiservers_rss_rise 12.5% over its bound 10%") {
		t.Errorf("OverBounds() = %q, want the memory rise named", over)
	}
	r.Protected.Measured["other_apiservers_rss_rise_percent"] = 6.4
	if over := r.OverBounds(); len(over) != 0 {
		t.Errorf("OverBounds() within the bound = %q, want none", over)
	}
}
