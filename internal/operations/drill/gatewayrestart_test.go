package drill_test

import (
	"testing"

	"github.com/rampart-io/rampart/internal/operations/drill"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestGatewayRestartDrill runs only the gateway-restart drill, killed and
// then drained, on one local cluster: quicker than TestDrills' two.
func TestGatewayRestartDrill(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 3, Gateway: true})
	killed, err := drill.NewTarget(env.Config, false, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	drained, err := drill.NewTarget(env.Config, true, "d", 1)
	if err != nil {
		t.Fatal(err)
	}
	killed.Local, drained.Local = env.Cluster, env.Cluster
	r := runOneDrill(t, "gateway-restart", killed, drained)
	t.Logf("killed:  %s %v", r.Unprotected, r.Unprotected.Measured)
	t.Logf("drained: %s %v", r.Protected, r.Protected.Measured)
	// What the drain does for certain: the watches end over the spread
	// (5s by default), not in the instant of a kill.
	if k, d := r.Unprotected.Measured["watchesEndedFirstSecond"], r.Protected.Measured["watchesEndedFirstSecond"]; d > k/2 {
		t.Errorf("drained gateway ended %v watches in its first second, killed one %v: the drain does not spread them", d, k)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
