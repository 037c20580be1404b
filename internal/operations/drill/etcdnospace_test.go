package drill_test

import (
	"testing"

	"github.com/rampart-io/rampart/internal/operations/drill"
)

// checkNoSpace: unprotected, writes stay refused for the whole window
// after the alarm; protected, the alert came first and recover brought
// writes back well within the window.
func checkNoSpace(t *testing.T, r drill.Result) {
	t.Helper()
	if r.Unprotected.Lost != r.Unprotected.Total {
		t.Errorf("etcd-nospace: unprotected %s, want writes refused for the whole window", r.Unprotected)
	}
	if r.Protected.Lost >= r.Protected.Total/2 {
		t.Errorf("etcd-nospace: protected %s, want writes back within half the window", r.Protected)
	}
	if a := r.Protected.Measured["alert_seconds_before_alarm"]; a <= 0 {
		t.Errorf("etcd-nospace: the alert fired %gs before the alarm, want before it", a)
	}
	for _, side := range []drill.Loss{r.Unprotected, r.Protected} {
		if side.Measured["business_read_errors"] > 0 {
			t.Errorf("etcd-nospace: %g business reads failed; etcd serves reads at NOSPACE", side.Measured["business_read_errors"])
		}
	}
}
