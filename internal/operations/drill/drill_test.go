package drill_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/drill"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestDrills replays every incident (at half the size of the reports; see
// RAMPART_DRILL_SCALE) on two real local clusters, one without Rampart and
// one with it: unprotected, the loss is real; protected, nothing is lost
// and the mistake was denied with the way to proceed.
func TestDrills(t *testing.T) {
	if testing.Short() {
		t.Skip("drills start local clusters")
	}
	scale := drillScale(t)
	// One simulated node per custom resource of the meta-cluster drill.
	nodes := max(1000/scale, 3)
	// Both run a gateway: the gateway drills compare going around it (or
	// killing it) with going through it (or stopping it gracefully).
	unprotectedEnv := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: nodes, Gateway: true, CustomResourceGroups: drill.CustomResourceGroups})
	protectedEnv := clustertest.Start(t, localcluster.Options{Nodes: nodes, Gateway: true, CustomResourceGroups: drill.CustomResourceGroups})
	unprotected, err := drill.NewTarget(unprotectedEnv.Config, false, "u", scale)
	if err != nil {
		t.Fatal(err)
	}
	protected, err := drill.NewTarget(protectedEnv.Config, true, "p", scale)
	if err != nil {
		t.Fatal(err)
	}
	unprotected.Local, protected.Local = unprotectedEnv.Cluster, protectedEnv.Cluster
	// A subtest per drill, in order, so that one drill and those after it
	// run alone: go test -run 'TestDrills/(etcd-nospace|...)$'. Each must
	// leave both clusters running for the next (etcd-nospace restarts
	// etcd twice under the API servers, the managers and the gateway).
	var results []drill.Result
	for _, d := range drill.All() {
		broken := false
		t.Run(d.Name, func(t *testing.T) {
			rs, err := drill.Run(context.Background(), []drill.Drill{d}, unprotected, protected, testWriter{t})
			for _, env := range []*clustertest.Env{unprotectedEnv, protectedEnv} {
				if exited := env.Exited(); len(exited) > 0 {
					broken = true
					t.Errorf("%s left %v exited on the cluster in %s", d.Name, exited, env.Dir)
				}
			}
			if err != nil {
				broken = true
				t.Fatal(err)
			}
			results = append(results, rs[0])
			checkDrill(t, rs[0])
		})
		if broken {
			// The drills after it would run on what it left.
			break
		}
	}
	if len(results) != len(drill.All()) {
		// Some drills were left out (-run) or failed: the report needs all.
		return
	}
	var table, report bytes.Buffer
	if err := drill.WriteTable(&table, results); err != nil {
		t.Fatal(err)
	}
	// `make test` prints the figures after the tests (its test logs
	// directory).
	if dir := os.Getenv("RAMPART_TEST_LOGS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "drills.txt"), table.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A line per drill under the header, then the figures of the drills
	// that measure more than a loss.
	lossTable, _, _ := strings.Cut(table.String(), "\n\n")
	if !strings.HasPrefix(lossTable, "DRILL") || strings.Count(lossTable, "\n") != len(results) || !strings.Contains(table.String(), "business_p99_ms") {
		t.Errorf("table:\n%s", table.String())
	}
	if err := drill.WriteJSON(&report, results, nil); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Drills []drill.Result `json:"drills"`
	}
	if err := json.Unmarshal(report.Bytes(), &decoded); err != nil || len(decoded.Drills) != len(results) {
		t.Fatalf("JSON report does not decode into %d drills: %v", len(results), err)
	}
}

// checkDrill: unprotected the incident's loss is real; protected it is
// within the bound, and the mistake was denied with the way to proceed.
func checkDrill(t *testing.T, r drill.Result) {
	t.Helper()
	t.Logf("unprotected %-45s protected %s (%.1fs)", r.Unprotected, r.Protected, r.Duration.Seconds())
	if r.Drill == "gateway-restart" {
		checkGatewayRestart(t, r)
		return
	}
	if r.Drill == "etcd-nospace" {
		checkNoSpace(t, r)
		return
	}
	if r.Drill == "stateful-maintenance" {
		checkStatefulMaintenance(t, r)
	}
	if r.Drill == "namespace-restore" || r.Drill == "etcd-direct-delete" {
		checkRecovery(t, r)
		return
	}
	if r.Drill == "list-storm-apf" {
		checkStormAPF(t, r)
		return
	}
	if r.Drill == "list-storm-routed" {
		checkStormRouted(t, r)
		return
	}
	if r.Unprotected.Lost <= r.Protected.Bound {
		t.Errorf("%s: unprotected loss %s is within the protected bound %d: the drill does not reproduce the incident", r.Drill, r.Unprotected, r.Protected.Bound)
	}
	// Nothing is lost under protection, or, for a flow control, at most
	// its limit — and then, at the limit exactly, the breaker holds.
	// A storm's bound is a share of requests (a p99) that it must stay
	// within; storms report their figures in Measured.
	if r.Drill == "pod-creation-surge" {
		checkSurge(t, r)
	}
	// A pod the node guard saved reads Running, not Failed, and keeps
	// serving: a ready endpoint, not replaced. Unprotected, every one of
	// them is lost from its Service and replaced.
	if r.Drill == "kubelet-bad-restart" {
		p, u := r.Protected.Measured, r.Unprotected.Measured
		if p["running_pods_read_failed"] > 0 || p["ready_endpoints_lost"] > 0 || p["replacements_created"] > 0 {
			t.Errorf("kubelet-bad-restart under protection: %g pods containerd still runs read Failed, %g ready endpoints lost, %g replacements created; want 0 each",
				p["running_pods_read_failed"], p["ready_endpoints_lost"], p["replacements_created"])
		}
		if total := float64(r.Unprotected.Total); u["ready_endpoints_lost"] != total || u["replacements_created"] != total {
			t.Errorf("kubelet-bad-restart unprotected: %g ready endpoints lost, %g replacements created; want %g each (the incident)",
				u["ready_endpoints_lost"], u["replacements_created"], total)
		}
	}
	// A node budget's floor holds exactly: every node of the pool leaves
	// without it, and with it exactly the floor's complement (no fewer:
	// it must not refuse what the floor allows).
	if strings.HasPrefix(r.Drill, "node-offlining-") {
		if r.Unprotected.Lost != r.Unprotected.Total || r.Protected.Lost != r.Protected.Bound {
			t.Errorf("%s: %s unprotected, %s protected; want all, and exactly %d", r.Drill, r.Unprotected, r.Protected, r.Protected.Bound)
		}
	}
	if r.Protected.Lost > r.Protected.Bound || r.Protected.Measured == nil && r.Protected.Lost != r.Protected.Bound {
		t.Errorf("%s: %s lost under protection, want %d", r.Drill, r.Protected, r.Protected.Bound)
	}
	if m := r.Protected.Measured; m != nil && m["business_errors"] > 0 {
		t.Errorf("%s: the business client had %g errors under protection", r.Drill, m["business_errors"])
	}
	// The way to proceed: a command, the window's override, the
	// flow control's reset, or what to LIST instead; or, for the
	// surge, the API server's own quota refusal, which names the
	// quota and its limit (the quota alerts tell the owners); or, for
	// a pod the API no longer has, the crictl that ends it.
	if d := r.Protected.Denied; d == "" || !(strings.Contains(d, "kubectl") || strings.Contains(d, "rampart.io/change-override") ||
		r.Drill == "orphaned-pods" && strings.Contains(d, "crictl --runtime-endpoint") ||
		strings.Contains(d, "rampart flowcontrol reset") || strings.Contains(d, "limit=500") ||
		r.Drill == "pod-creation-surge" && strings.Contains(d, "exceeded quota: rampart")) {
		t.Errorf("%s: the protected mistake was not denied with a way to proceed: %q", r.Drill, r.Protected.Denied)
	}
	if r.Unprotected.Denied != "" {
		t.Errorf("%s: something denied the mistake on the unprotected cluster: %s", r.Drill, r.Unprotected.Denied)
	}
}

// drillScale is RAMPART_DRILL_SCALE: make test runs the drills at half
// their size (default 2) to keep CI short; `rampart drill` runs them whole.
func drillScale(t *testing.T) int {
	t.Helper()
	s := os.Getenv("RAMPART_DRILL_SCALE")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("RAMPART_DRILL_SCALE=%q: want a positive integer", s)
	}
	return n
}

func TestSelectNamesTheKnownDrills(t *testing.T) {
	if _, _, err := drill.Select([]string{"no-such-drill"}); err == nil || !strings.Contains(err.Error(), "crd-deletion") || !strings.Contains(err.Error(), "rolling-update") {
		t.Fatalf("Select of an unknown drill = %v, want an error listing the drills and the operations", err)
	}
	got, ops, err := drill.Select([]string{"scale-to-zero-typo", "hpa-scale"})
	if err != nil || len(got) != 1 || got[0].Name != "scale-to-zero-typo" || len(ops) != 1 || ops[0].Name != "hpa-scale" {
		t.Fatalf("Select = %v, %v, %v", got, ops, err)
	}
	all, ops, err := drill.Select(nil)
	if err != nil || len(all) != len(drill.All()) || len(ops) != len(drill.Everyday()) {
		t.Fatalf("Select of nothing = %d drills, %d operations, %v; want all of both", len(all), len(ops), err)
	}
}

// checkRecovery: the recycle bin's drills deny nothing (the namespace is
// unprotected, etcd is written past admission); unprotected everything is
// lost, protected everything is back, with the time it took.
func checkRecovery(t *testing.T, r drill.Result) {
	t.Helper()
	if r.Unprotected.Total == 0 || r.Unprotected.Lost != r.Unprotected.Total {
		t.Errorf("%s: unprotected %s, want every object lost", r.Drill, r.Unprotected)
	}
	if r.Protected.Lost != 0 {
		t.Errorf("%s: %s with the recycle bin, want every object back", r.Drill, r.Protected)
	}
	if r.Protected.Measured["restore_seconds"] == 0 && r.Protected.Measured["restored_seconds"] == 0 {
		t.Errorf("%s: no restore time measured: %v", r.Drill, r.Protected.Measured)
	}
	if r.Drill == "etcd-direct-delete" {
		// etcd's door: only the API server may write /registry/, so the
		// administrator's deletes are refused by etcd itself, every one.
		if refused := r.Protected.Measured["deletes_refused_by_etcd"]; refused != float64(r.Protected.Total) || !strings.Contains(r.Protected.Denied, "permission denied") {
			t.Errorf("etcd-direct-delete: etcd refused %g of %d deletes (%q), want all, with etcd's authentication on", refused, r.Protected.Total, r.Protected.Denied)
		}
		if r.Unprotected.Denied != "" {
			t.Errorf("etcd-direct-delete: etcd refused the unprotected cluster's delete: %q", r.Unprotected.Denied)
		}
		return
	}
	if r.Unprotected.Denied != "" || r.Protected.Denied != "" {
		t.Errorf("%s: something denied the mistake: %q / %q", r.Drill, r.Unprotected.Denied, r.Protected.Denied)
	}
}

// checkGatewayRestart: no watcher relists when the gateway stops
// gracefully, and the default policy's policyNewPerSecond (200) bounds the
// wave of re-watches: a token bucket admits at most its burst plus one
// second's refill in any one second. Killed, a gateway does not make
// client-go relist either (reset connections read as a clean end), so the
// unprotected side is reported, not asserted.
func checkGatewayRestart(t *testing.T, r drill.Result) {
	t.Helper()
	if r.Protected.Lost != 0 {
		t.Errorf("gateway-restart: %s under a graceful restart, want none", r.Protected)
	}
	if peak := r.Protected.Measured["peakRewatchesPerSecond"]; peak > 2*200 {
		t.Errorf("gateway-restart: %g re-watches in the peak second through the default policy, want at most 400", peak)
	}
}

// checkSurge: the quota caps the surge (its bound, checked with the
// others, is the quota's headroom and a tenth of its limit: Kubernetes'
// quota can be overshot during a surge, as its controller recounts from a
// lagging informer and admission trusts the lower count,
// kubernetes/kubernetes#123434; the drill measures quota_overshoot_pods),
// and to less than half the unprotected surge.
func checkSurge(t *testing.T, r drill.Result) {
	t.Helper()
	m := r.Protected.Measured
	hard, peak := m["quota_pods"], m["peak_pods"]
	if hard == 0 {
		t.Errorf("%s: no quota was applied", r.Drill)
	}
	if 2*r.Protected.Lost >= r.Unprotected.Lost {
		t.Errorf("%s: protected %s against unprotected %s: the quota did not cap the surge", r.Drill, r.Protected, r.Unprotected)
	}
	t.Logf("%s: quota of %v pods, %v at once (overshoot %v); controllers behind %.1fs unprotected, %.1fs protected; API server RSS +%.0f MiB unprotected, +%.0f MiB protected",
		r.Drill, hard, peak, m["quota_overshoot_pods"], r.Unprotected.Measured["controllers_behind_s"], m["controllers_behind_s"],
		r.Unprotected.Measured["apiserver_peak_rss_mib"]-r.Unprotected.Measured["apiserver_calm_rss_mib"],
		m["apiserver_peak_rss_mib"]-m["apiserver_calm_rss_mib"])
}

// checkStormAPF: with the suggested API Priority and Fairness objects and
// no gateway, the business client has no error and its median is under
// half the unprotected one (measured in one run). The drill's own bound
// (p99 under 1 s) is for rampart drill at full scale: here it runs small,
// beside the other packages' clusters on two cores; its figures are in
// the README. APF queues the storm rather than refusing it: no denial.
func checkStormAPF(t *testing.T, r drill.Result) {
	t.Helper()
	p, u := r.Protected.Measured, r.Unprotected.Measured
	t.Logf("list-storm-apf: business p50/p99 %.0f/%.0f ms unprotected, %.0f/%.0f ms with APF (heavy level %g seats, %g clients); storm LISTs served %g / %g",
		u["business_p50_ms"], u["business_p99_ms"], p["business_p50_ms"], p["business_p99_ms"], p["apf_heavy_level_seats"], p["apf_isolated_clients"],
		u["storm_lists_served"], p["storm_lists_served"])
	if p["apf_isolated_clients"] != 3 {
		t.Errorf("list-storm-apf: the advisor isolated %g clients, want the storm's 3 tools", p["apf_isolated_clients"])
	}
	if p["business_errors"] > 0 || p["business_p50_ms"] > u["business_p50_ms"]/2 {
		t.Errorf("list-storm-apf: with APF the business client had %g errors and a p50 of %.0f ms, against %.0f ms without",
			p["business_errors"], p["business_p50_ms"], u["business_p50_ms"])
	}
}

// checkStormRouted: with the storm routed to pool heavy, every storm LIST
// is admitted and served through the route (the gateway's count), none
// refused, and the business client has no error. The drill's bounds (p99
// under 1 s, the other API servers' memory up less than 10%) are for
// rampart drill at full scale: here it runs small, beside the other
// packages' clusters on two cores, and its figures are logged; its
// figures at full scale are in the README.
func checkStormRouted(t *testing.T, r drill.Result) {
	t.Helper()
	p, u := r.Protected.Measured, r.Unprotected.Measured
	t.Logf("list-storm-routed: business p50/p99 %.0f/%.0f ms spread over %g API servers, %.0f/%.0f ms routed; other API servers' memory +%.1f%% spread, +%.1f%% routed (routed-to one %.0f -> %.0f MiB); storm LISTs served %g / %g (routed %g)",
		u["business_p50_ms"], u["business_p99_ms"], u["apiservers"], p["business_p50_ms"], p["business_p99_ms"],
		u["other_apiservers_rss_rise_percent"], p["other_apiservers_rss_rise_percent"], p["routed_apiserver_calm_rss_mib"], p["routed_apiserver_peak_rss_mib"],
		u["storm_lists_served"], p["storm_lists_served"], p["storm_lists_routed"])
	if p["apiservers"] != 3 || u["apiservers"] != 3 {
		t.Errorf("list-storm-routed ran on %g and %g API servers, want 3", u["apiservers"], p["apiservers"])
	}
	if p["storm_lists_served"] == 0 || p["storm_lists_refused"] > 0 || r.Protected.Denied != "" {
		t.Errorf("list-storm-routed: the routed storm had %g LISTs served and %g refused (%q), want them admitted", p["storm_lists_served"], p["storm_lists_refused"], r.Protected.Denied)
	}
	if p["storm_lists_routed"] < p["storm_lists_served"] {
		t.Errorf("list-storm-routed: %g storm LISTs served but %g routed to pool heavy", p["storm_lists_served"], p["storm_lists_routed"])
	}
	if p["business_errors"] > 0 {
		t.Errorf("list-storm-routed: the business client had %g errors with the storm routed away", p["business_errors"])
	}
}
