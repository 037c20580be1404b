package drill_test

import (
	"context"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/drill"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestEtcdNoSpaceDrill runs only the etcd-nospace drill, small, on one
// local cluster (both sides in turn): quicker than TestDrills' two.
func TestEtcdNoSpaceDrill(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Unprotected: true})
	unprotected, err := drill.NewTarget(env.Config, false, "u", 2)
	if err != nil {
		t.Fatal(err)
	}
	protected, err := drill.NewTarget(env.Config, true, "p", 2)
	if err != nil {
		t.Fatal(err)
	}
	unprotected.Local, protected.Local = env.Cluster, env.Cluster
	d, _, err := drill.Select([]string{"etcd-nospace"})
	if err != nil {
		t.Fatal(err)
	}
	results, err := drill.Run(context.Background(), d, unprotected, protected, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	r := results[0]
	t.Logf("unprotected: %s %v", r.Unprotected, r.Unprotected.Measured)
	t.Logf("protected:   %s %v (%.1fs)", r.Protected, r.Protected.Measured, r.Duration.Seconds())
	checkNoSpace(t, r)
}

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
