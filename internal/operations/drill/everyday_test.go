package drill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/operations/drill"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestEverydayOperations times every everyday operation (at half size,
// see RAMPART_DRILL_SCALE) on two real local clusters, one without
// Rampart and one with it as the chart installs it: under protection each
// must be done within 1.1× the unprotected time plus 5 s, with nothing
// refused that should have passed.
func TestEverydayOperations(t *testing.T) {
	if testing.Short() {
		t.Skip("everyday operations start local clusters")
	}
	scale := drillScale(t)
	// RAMPART_OPERATIONS=node-dies,drain runs only those.
	ops := drill.Everyday()
	if names := os.Getenv("RAMPART_OPERATIONS"); names != "" {
		var err error
		if _, ops, err = drill.Select(strings.Split(names, ",")); err != nil || len(ops) == 0 {
			t.Fatalf("RAMPART_OPERATIONS=%q: %v", names, err)
		}
	}
	started := time.Now()
	unprotectedEnv := clustertest.Start(t, drill.OperationsCluster(false))
	protectedEnv := clustertest.Start(t, drill.OperationsCluster(true))
	t.Logf("clusters started in %.1fs", time.Since(started).Seconds())
	unprotected, err := drill.NewTarget(unprotectedEnv.Config, false, "u", scale)
	if err != nil {
		t.Fatal(err)
	}
	protected, err := drill.NewTarget(protectedEnv.Config, true, "p", scale)
	if err != nil {
		t.Fatal(err)
	}
	unprotected.Local, protected.Local = unprotectedEnv.Cluster, protectedEnv.Cluster
	ran := time.Now()
	results, err := drill.RunOperations(context.Background(), ops, unprotected, protected, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("operations ran in %.1fs", time.Since(ran).Seconds())
	var table bytes.Buffer
	if err := drill.WriteOperationsTable(&table, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if dir := os.Getenv("RAMPART_TEST_LOGS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "operations.txt"), table.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(results) != len(ops) {
		t.Fatalf("%d results for %d operations", len(results), len(ops))
	}
	for _, r := range results {
		t.Logf("%-23s took %.1fs for both sides", r.Operation, r.Duration.Seconds())
		if r.Unprotected.Refused > 0 {
			t.Errorf("%s: %d refused on the cluster without Rampart: %v", r.Operation, r.Unprotected.Refused, r.Unprotected.Refusals)
		}
		why, known := knownRefusals[r.Operation]
		switch {
		case r.Verdict == drill.VerdictOK && known:
			t.Logf("%s met its bound this time, with no refusal (they depend on timing; if it keeps meeting it, take it off knownRefusals and docs/drills.md)", r.Operation)
		case r.Verdict == drill.VerdictOK:
		case r.Verdict == drill.VerdictRefused && known:
			t.Logf("%s: %d refused under protection, known (%s): %s", r.Operation, r.Protected.Refused, why, strings.Join(r.Protected.Refusals, "; "))
		default:
			t.Errorf("%s: %s: unprotected %s, protected %s (bound %.1fs), %d refused: %s",
				r.Operation, r.Verdict, r.Unprotected, r.Protected, r.Bound.Seconds(), r.Protected.Refused, strings.Join(r.Protected.Refusals, "; "))
		}
	}
}

// knownRefusals are the operations known to see a few refusals under
// protection though they finish within their bound, each with why; the
// docs/drills.md ("Everyday operations, timed") says so and what the user does.
// They are logged, not failed, as long as they finish in time.
var knownRefusals = map[string]string{
	"manager-rolling-restart": "each local manager replica serves a fixed share of the webhook calls by URL: while one restarts, its share fails closed",
	"uninstall-mid-rollout": "a call the API server makes before it drops the deleted webhook configuration, or one in flight when the manager stops, " +
		"is refused; the ReplicaSet controller retries",
}

func TestOperationVerdicts(t *testing.T) {
	done := func(s float64, refused int) drill.Timing {
		return drill.Timing{Took: time.Duration(s * float64(time.Second)), Done: true, Refused: refused}
	}
	for _, tt := range []struct {
		name                   string
		unprotected, protected drill.Timing
		bound                  time.Duration
		want                   string
	}{
		{"within the bound", done(10, 0), done(16, 0), 16 * time.Second, drill.VerdictOK},
		{"over the bound", done(10, 0), done(16.1, 0), 16 * time.Second, drill.VerdictSlower},
		{"faster", done(60, 0), done(30, 0), 71 * time.Second, drill.VerdictOK},
		{"refused though in time", done(10, 0), done(10, 1), 16 * time.Second, drill.VerdictRefused},
		{"never done", done(10, 0), drill.Timing{Took: time.Minute, Refused: 3}, 16 * time.Second, drill.VerdictNotDone},
		{"the baseline never done", drill.Timing{Took: time.Minute}, done(1, 0), 71 * time.Second, drill.VerdictBaseline},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := drill.OperationResult{Operation: "op", Unprotected: tt.unprotected, Protected: tt.protected}
			r.Judge()
			if r.Verdict != tt.want || r.Bound != tt.bound {
				t.Errorf("verdict %q, bound %v; want %q, %v", r.Verdict, r.Bound, tt.want, tt.bound)
			}
		})
	}
}

func TestOperationsTable(t *testing.T) {
	results := []drill.OperationResult{
		{Operation: "node-dies", Unprotected: drill.Timing{Took: 58 * time.Second, Done: true, Measured: map[string]float64{"pod_deleted_s": 57}},
			Protected: drill.Timing{Took: 115 * time.Second, Refused: 2, Refusals: []string{"2 × budgets.rampart.io DELETE 429"}, Measured: map[string]float64{"pod_deleted_s": 0}}},
		{Operation: "crd-removal", Unprotected: drill.Timing{Took: time.Second, Done: true}, Protected: drill.Timing{Took: 1200 * time.Millisecond, Done: true}},
	}
	for i := range results {
		results[i].Judge()
	}
	var b bytes.Buffer
	if err := drill.WriteOperationsTable(&b, results); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"OPERATION    UNPROTECTED  PROTECTED           BOUND  REFUSED  VERDICT",
		"node-dies    58.0s        >115.0s (not done)  68.8s  2        not done",
		"crd-removal  1.0s         1.2s                6.1s   0        ok",
		"node-dies (protected): 2 refused\n  2 × budgets.rampart.io DELETE 429",
		"node-dies  pod_deleted_s  57           0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if got := drill.OperationsFailed(results); len(got) != 1 || got[0] != "node-dies" {
		t.Errorf("OperationsFailed = %v, want [node-dies]", got)
	}
	var report bytes.Buffer
	if err := drill.WriteJSON(&report, nil, results); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Operations []drill.OperationResult `json:"operations"`
	}
	if err := json.Unmarshal(report.Bytes(), &decoded); err != nil || len(decoded.Operations) != 2 || decoded.Operations[0].Verdict != drill.VerdictNotDone {
		t.Errorf("JSON report = %s (%v)", report.String(), err)
	}
}
