package gateway_test

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/cli"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// rampart runs the rampart command tree in-process with the admin's
// direct kubeconfig.
func rampart(t *testing.T, env *clustertest.Env, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--kubeconfig", env.Kubeconfig))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// breakerStatus is the cluster gateway's entry of status.breakers of
// policy.
func breakerStatus(t *testing.T, env *clustertest.Env, policy string) (state, reason string) {
	t.Helper()
	e := breakerEntry(t, env, policy, localcluster.GatewayName)
	return e.State, e.Reason
}

// breakerEntry is the entry of status.breakers of policy that replica gw
// wrote; empty if none.
type statusEntry struct{ State, Reason, Since string }

func breakerEntry(t *testing.T, env *clustertest.Env, policy, gw string) statusEntry {
	t.Helper()
	u, err := env.Dynamic.Resource(gateway.TrafficPolicies).Get(context.Background(), policy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "breakers")
	var out statusEntry
	for _, e := range list {
		m, _ := e.(map[string]any)
		if m["gateway"] == gw {
			out.State, _ = m["state"].(string)
			out.Reason, _ = m["reason"].(string)
			out.Since, _ = m["since"].(string)
		}
	}
	return out
}

func waitBreakerState(t *testing.T, env *clustertest.Env, policy, want string, timeout time.Duration) string {
	t.Helper()
	return waitBreakerStateOf(t, env, policy, localcluster.GatewayName, want, timeout).Reason
}

func waitBreakerStateOf(t *testing.T, env *clustertest.Env, policy, gw, want string, timeout time.Duration) statusEntry {
	t.Helper()
	var e statusEntry
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		e = breakerEntry(t, env, policy, gw)
		return e.State == want, nil
	})
	if err != nil {
		t.Fatalf("status.breakers of %s, gateway %s: %q (%s), want %s", policy, gw, e.State, e.Reason, want)
	}
	return e
}

// An operator opens a breaker by hand: the policy's clients are refused
// at once with a message that says how to close it, an identity exempted
// at lower precedence still passes, and status, the CLI and the metrics
// show it. Closed, the share let through grows over the ramp.
func TestBreakerOpenedByHandRefusesAtOnceAndRampsBack(t *testing.T) {
	env := clustertest.Get(t)
	applyPolicy(t, env, "t-breaker-exempt", `{precedence: 10, action: Exempt, match: [{users: [breaker-admin]}]}`)
	applyPolicy(t, env, "t-breaker", `{precedence: 20, action: Limit, breaker: {rampSeconds: 6}, match: [{groups: [breaker-testers]}]}`)
	user := httpClient(t, userConfig(t, env, "breaker-user", "breaker-testers"))
	admin := httpClient(t, userConfig(t, env, "breaker-admin", "breaker-testers"))
	url := env.GatewayURL() + "/version"
	waitBreakerState(t, env, "t-breaker", "Closed", 20*time.Second)

	if out, err := rampart(t, env, "gateway", "breaker", "open", "--policy", "t-breaker-exempt"); err == nil || !strings.Contains(err.Error(), "action Exempt") {
		t.Errorf("opening the breaker of an Exempt policy: %v %s; want an error saying it is Exempt", err, out)
	}
	opened := time.Now()
	if out, err := rampart(t, env, "gateway", "breaker", "open", "--policy", "t-breaker"); err != nil {
		t.Fatalf("breaker open: %v\n%s", err, out)
	}
	var refused answer
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		refused = get(t, user, url)
		return refused.code == http.StatusTooManyRequests, nil
	})
	if err != nil {
		t.Fatalf("breaker-user not refused after the breaker was opened; last answer %+v", refused)
	}
	t.Logf("refused %s after `breaker open`", time.Since(opened).Round(time.Millisecond))
	for _, want := range []string{`TrafficPolicy "t-breaker" has its circuit breaker open`, "opened by hand", "rampart gateway breaker close --policy t-breaker", "kubectl patch trafficpolicy t-breaker"} {
		if !strings.Contains(refused.message, want) {
			t.Errorf("refusal %q lacks %q", refused.message, want)
		}
	}
	if n, err := strconv.Atoi(refused.retryAfter); err != nil || n < 5 || n > 11 {
		t.Errorf("Retry-After %q, want 5 to 11 seconds", refused.retryAfter)
	}
	for range 10 {
		if a := get(t, user, url); a.code != http.StatusTooManyRequests {
			t.Fatalf("an open breaker let a request through: %+v", a)
		}
		if a := get(t, admin, url); a.code != http.StatusOK {
			t.Fatalf("breaker-admin, exempt at lower precedence, got %+v", a)
		}
	}
	waitBreakerState(t, env, "t-breaker", "Open", 20*time.Second)
	out, err := rampart(t, env, "gateway", "breaker", "status")
	if err != nil || !regexpMatch(`t-breaker\s+true\s+rampart-gateway\s+Open\s+.*opened by hand`, out) {
		t.Errorf("rampart gateway breaker status: %v\n%s", err, out)
	}
	t.Logf("rampart gateway breaker status:\n%s", out)
	out, err = rampart(t, env, "status")
	if err != nil || !regexpMatch(`(?s)GATEWAY BREAKERS.*t-breaker\s+true\s+rampart-gateway\s+Open`, out) {
		t.Errorf("rampart status shows no open breaker: %v\n%s", err, out)
	}

	// Closed, a client firing steadily is let through more and more.
	if out, err := rampart(t, env, "gateway", "breaker", "close", "--policy", "t-breaker"); err != nil {
		t.Fatalf("breaker close: %v\n%s", err, out)
	}
	closed := time.Now()
	type shot struct {
		at time.Duration
		ok bool
	}
	var shots []shot
	for time.Since(closed) < 10*time.Second {
		a := get(t, user, url)
		if a.code != http.StatusOK && a.code != http.StatusTooManyRequests {
			t.Fatalf("unexpected answer while ramping: %+v", a)
		}
		if a.code == http.StatusTooManyRequests && time.Since(closed) > time.Second && !strings.Contains(a.message, "letting requests back gradually") {
			t.Errorf("refusal while ramping: %q", a.message)
		}
		shots = append(shots, shot{time.Since(closed), a.code == http.StatusOK})
		time.Sleep(40 * time.Millisecond)
	}
	share := func(from, to time.Duration) (float64, int) {
		n, ok := 0, 0
		for _, s := range shots {
			if s.at >= from && s.at < to {
				n++
				if s.ok {
					ok++
				}
			}
		}
		return float64(ok) / float64(max(n, 1)), n
	}
	early, n1 := share(0, 2*time.Second)
	mid, n2 := share(2*time.Second, 6*time.Second)
	late, n3 := share(8*time.Second, 10*time.Second)
	t.Logf("admitted share after close: %.2f in 0-2s (%d), %.2f in 2-6s (%d), %.2f in 8-10s (%d)", early, n1, mid, n2, late, n3)
	if early > 0.6 || mid <= 0 || mid >= 1 || late != 1 {
		t.Errorf("ramp over 6s: admitted %.2f in 0-2s, %.2f in 2-6s, %.2f in 8-10s; want a small share, a partial one, then all", early, mid, late)
	}
	waitBreakerState(t, env, "t-breaker", "Closed", 10*time.Second)
	metrics := scrape(t, env)
	for _, to := range []string{"Open", "Ramping", "Closed"} {
		if metric(metrics, `rampart_gateway_breaker_transitions_total{policy="t-breaker",to="`+to+`"}`) < 1 {
			t.Errorf("no transition of t-breaker to %s counted", to)
		}
	}
	if metric(metrics, `rampart_gateway_breaker_state{policy="t-breaker",state="Closed"}`) != 1 {
		t.Errorf("rampart_gateway_breaker_state does not show t-breaker Closed")
	}
	if metric(metrics, `rampart_gateway_rejections_total{policy="t-breaker",reason="breaker"}`) < 10 {
		t.Errorf("the breaker's refusals are not counted as rejections")
	}

	// A policy that loses its breaker loses the gateway's status entry.
	applyPolicy(t, env, "t-breaker", `{precedence: 20, action: Limit, limit: {qps: 1000}, match: [{groups: [breaker-testers]}]}`)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		state, _ := breakerStatus(t, env, "t-breaker")
		return state == "", nil
	})
	if err != nil {
		t.Error("status.breakers still has the gateway's entry after spec.breaker was removed")
	}
}

// With a trip, the breaker opens by itself when the API servers' answers
// cross a threshold, ramps back after openSeconds, opens again while the
// distress lasts and closes once it is gone. Distress here is cheap: a
// p90 latency threshold of 1ms, which ordinary requests cross, judged only
// at a rate of answers that only the test's load reaches.
func TestBreakerTripsOnDistressAndRecovers(t *testing.T) {
	env := clustertest.Get(t)
	applyPolicy(t, env, "t-breaker-trip", `{precedence: 20, action: Limit, breaker: {rampSeconds: 2, trip: {latencyMilliseconds: 1, forSeconds: 2, minRequestsPerSecond: 40, openSeconds: 3}}, match: [{users: [breaker-trip-user]}]}`)
	user := httpClient(t, userConfig(t, env, "breaker-trip-user"))
	url := env.GatewayURL() + "/version"
	waitBreakerState(t, env, "t-breaker-trip", "Closed", 20*time.Second)
	if a := get(t, user, url); a.code != http.StatusOK {
		t.Fatalf("before any distress: %+v", a)
	}

	stopLoad, sent := distress(t, env, env.GatewayURL())
	defer stopLoad()

	loaded := time.Now()
	var refused answer
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		refused = get(t, user, url)
		return refused.code == http.StatusTooManyRequests, nil
	})
	if err != nil {
		t.Fatalf("the breaker did not trip under load (%d requests sent); last answer %+v", sent.Load(), refused)
	}
	t.Logf("tripped %s after the load began: %s", time.Since(loaded).Round(time.Millisecond), refused.message)
	if took := time.Since(loaded); took < 2*time.Second {
		t.Errorf("tripped %s after the load began: the distress must last forSeconds (2s) first", took)
	}
	for _, want := range []string{`TrafficPolicy "t-breaker-trip" has its circuit breaker open`, "p90 latency of short requests", "> latencyMilliseconds 1", "lets requests back gradually from"} {
		if !strings.Contains(refused.message, want) {
			t.Errorf("refusal %q lacks %q", refused.message, want)
		}
	}
	if n, _ := strconv.Atoi(refused.retryAfter); n < 1 || n > 9 {
		t.Errorf("Retry-After %q, want about the rest of openSeconds (3s) plus jitter", refused.retryAfter)
	}
	if reason := waitBreakerState(t, env, "t-breaker-trip", "Open", 10*time.Second); !strings.Contains(reason, "p90 latency") {
		t.Errorf("status reason %q does not say which threshold tripped", reason)
	}
	// openSeconds later it ramps back, and opens again: the load goes on.
	reopened := `rampart_gateway_breaker_transitions_total{policy="t-breaker-trip",to="Open"}`
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return metric(scrape(t, env), reopened) >= 2, nil
	})
	if err != nil {
		t.Fatalf("the breaker did not open again while the distress lasted: %s = %v", reopened, metric(scrape(t, env), reopened))
	}
	if metric(scrape(t, env), `rampart_gateway_breaker_transitions_total{policy="t-breaker-trip",to="Ramping"}`) < 1 {
		t.Error("the breaker never ramped back after openSeconds")
	}

	stopLoad()
	unloaded := time.Now()
	waitBreakerState(t, env, "t-breaker-trip", "Closed", 30*time.Second)
	t.Logf("Closed %s after the load stopped", time.Since(unloaded).Round(time.Millisecond))
	if a := get(t, user, url); a.code != http.StatusOK {
		t.Errorf("the breaker is Closed but the client gets %+v", a)
	}
}

// distress loads each gateway at urls until stop: the admin (no policy)
// reads a Namespace with ten workers per gateway (each pausing 5ms), which a trip
// on a p90 latency of 1ms over at least 20-40 answers a second calls
// distress.
// stop may be called more than once.
func distress(t *testing.T, env *clustertest.Env, urls ...string) (stop func(), sent *atomic.Int64) {
	admin := httpClient(t, viaGateway(t, env))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sent = new(atomic.Int64)
	for _, url := range urls {
		// Enough workers that each gateway sees well over the trips'
		// minRequestsPerSecond (40) on a loaded machine: 3 gave ~50/s,
		// and 6 too few on a loaded CI run (a replica never tripped in
		// 90 s), when each answer took over 100 ms.
		for range 10 {
			wg.Go(func() {
				for ctx.Err() == nil {
					// The cheapest read, not a LIST: the rate of answers must
					// not fall with what other tests left in the cluster or
					// with the load of other packages' tests (a LIST of 50
					// ConfigMaps gave a gateway under 40 answers a second on
					// a loaded CI run).
					if resp, err := admin.Get(url + "/api/v1/namespaces/default"); err == nil {
						resp.Body.Close()
					}
					sent.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	return func() { cancel(); wg.Wait() }, sent
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// Two gateway replicas trip on the same distress, each keeps its own entry
// of status.breakers, and the CLI shows both. An operator who closes the
// breaker by hand ends both trips: each replica lets the requests back
// over the ramp, and does not reopen on the distress measured before the
// close (the load stops at the close; its answers are still in the
// window).
func TestBreakerCloseByHandEndsATripInEveryReplica(t *testing.T) {
	env := clustertest.Get(t)
	const policy, replica = "t-breaker-close", "rampart-gateway-b"
	applyPolicy(t, env, policy, `{precedence: 20, action: Limit, breaker: {rampSeconds: 4, trip: {latencyMilliseconds: 1, forSeconds: 2, minRequestsPerSecond: 20, openSeconds: 600}}, match: [{users: [breaker-close-user]}]}`)
	viaReplica, _ := inProcessGateway(t, env, gateway.Options{Upstreams: env.APIServerURLs(), Name: replica})
	urls := map[string]string{localcluster.GatewayName: env.GatewayURL(), replica: viaReplica.Host}
	user := httpClient(t, userConfig(t, env, "breaker-close-user"))
	for gw := range urls {
		waitBreakerStateOf(t, env, policy, gw, "Closed", 20*time.Second)
	}

	stopLoad, sent := distress(t, env, urls[localcluster.GatewayName], urls[replica])
	defer stopLoad()
	for gw, url := range urls {
		e := waitBreakerStateOf(t, env, policy, gw, "Open", 90*time.Second) // the noisy machine can be slow to load
		if !strings.HasPrefix(e.Reason, "tripped: p90 latency") {
			t.Errorf("%s: status reason %q, want the threshold that tripped it", gw, e.Reason)
		}
		a := get(t, user, url+"/version")
		if a.code != http.StatusTooManyRequests || !strings.Contains(a.message, "an operator ends it now with: rampart gateway breaker close --policy "+policy) {
			t.Errorf("%s, tripped: %+v; want a 429 saying how an operator ends the trip", gw, a)
		}
	}
	t.Logf("both replicas tripped after %d requests of load", sent.Load())
	out, err := rampart(t, env, "gateway", "breaker", "status")
	for gw := range urls {
		if err != nil || !regexpMatch(policy+`\s+false\s+`+gw+`\s+Open\s+.*tripped: p90 latency`, out) {
			t.Errorf("rampart gateway breaker status does not show %s Open: %v\n%s", gw, err, out)
		}
	}
	t.Logf("rampart gateway breaker status:\n%s", out)
	out, err = rampart(t, env, "status")
	for gw := range urls {
		if err != nil || !regexpMatch(`(?s)GATEWAY BREAKERS.*`+policy+`\s+false\s+`+gw+`\s+Open`, out) {
			t.Errorf("rampart status does not show %s Open: %v\n%s", gw, err, out)
		}
	}

	stopLoad()
	out, err = rampart(t, env, "gateway", "breaker", "close", "--policy", policy)
	if err != nil || !strings.Contains(out, "it had opened by itself on distress in gateway") ||
		!strings.Contains(out, localcluster.GatewayName) || !strings.Contains(out, replica) || !strings.Contains(out, "come back over 4s") {
		t.Fatalf("breaker close of a tripped breaker: %v\n%s", err, out)
	}
	t.Logf("rampart gateway breaker close: %s", out)
	closed := time.Now()

	// Each replica ramps: a share of the requests refused as ramping,
	// then all let through; never the open breaker's refusal again once
	// the ramp has begun.
	type tally struct{ open, ramping, ok, reopened int }
	seen := map[string]*tally{}
	for gw := range urls {
		seen[gw] = &tally{}
	}
	for time.Since(closed) < 8*time.Second {
		for gw, url := range urls {
			a, n := get(t, user, url+"/version"), seen[gw]
			switch {
			case a.code == http.StatusOK:
				n.ok++
			case a.code == http.StatusTooManyRequests && strings.Contains(a.message, "letting requests back gradually"):
				n.ramping++
			case a.code == http.StatusTooManyRequests && strings.Contains(a.message, "circuit breaker open"):
				if n.ok+n.ramping > 0 {
					n.reopened++
				}
				n.open++
			default:
				t.Fatalf("%s after the close: %+v", gw, a)
			}
		}
		// Slow enough that the user's own requests stay under the
		// trip's minRequestsPerSecond (20) at each replica: they must
		// not be a new distress once the ramp lets them through.
		time.Sleep(60 * time.Millisecond)
	}
	for gw, n := range seen {
		t.Logf("%s in the 8s after the close: %d refused as open (before the replica saw the close), %d refused as ramping, %d let through", gw, n.open, n.ramping, n.ok)
		if n.ramping == 0 || n.ok == 0 || n.reopened > 0 {
			t.Errorf("%s after the close: %+v; want requests refused as ramping, then let through, and the breaker not open again", gw, *n)
		}
		if e := breakerEntry(t, env, policy, gw); e.State != "Closed" {
			t.Errorf("%s 8s after the close (ramp 4s): status %+v, want Closed", gw, e)
		}
		if a := get(t, user, urls[gw]+"/version"); a.code != http.StatusOK {
			t.Errorf("%s after the ramp: %+v", gw, a)
		}
	}
	if n := metric(scrape(t, env), `rampart_gateway_breaker_transitions_total{policy="`+policy+`",to="Open"}`); n != 1 {
		t.Errorf("%s: %v transitions to Open, want 1 (the trip; none after the close)", localcluster.GatewayName, n)
	}
}

// A gateway that crashes while its breaker is tripped comes back with it
// open for the rest of openSeconds (from its own status.breakers entry),
// not letting every request through at once; one opened by hand comes
// back open too (that is spec).
func TestBreakerTripSurvivesGatewayRestart(t *testing.T) {
	env := clustertest.Get(t)
	const policy = "t-breaker-restart"
	applyPolicy(t, env, policy, `{precedence: 20, action: Limit, breaker: {rampSeconds: 2, trip: {latencyMilliseconds: 1, forSeconds: 2, minRequestsPerSecond: 40, openSeconds: 120}}, match: [{users: [breaker-restart-user]}]}`)
	user := httpClient(t, userConfig(t, env, "breaker-restart-user"))
	url := env.GatewayURL() + "/version"
	waitBreakerState(t, env, policy, "Closed", 20*time.Second)

	stopLoad, _ := distress(t, env, env.GatewayURL())
	defer stopLoad()
	tripped := waitBreakerStateOf(t, env, policy, localcluster.GatewayName, "Open", 90*time.Second) // the noisy machine can be slow to load
	stopLoad()
	before := get(t, user, url)
	if before.code != http.StatusTooManyRequests {
		t.Fatalf("tripped: %+v", before)
	}
	since, err := time.Parse(time.RFC3339, tripped.Since)
	if err != nil {
		t.Fatal(err)
	}
	until := since.Add(120 * time.Second).UTC().Format(time.RFC3339)

	restart := func() time.Duration {
		t.Helper()
		if err := env.KillComponent(localcluster.GatewayName); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := env.StartGateway(context.Background()); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	took := restart()
	after := get(t, user, url)
	t.Logf("gateway killed and started again in %s; first answer: %d %s", took.Round(time.Millisecond), after.code, after.message)
	for _, want := range []string{"circuit breaker open since " + tripped.Since, "p90 latency of short requests", "lets requests back gradually from " + until} {
		if after.code != http.StatusTooManyRequests || !strings.Contains(after.message, want) {
			t.Errorf("first answer after the restart: %d %q, want a 429 with %q", after.code, after.message, want)
		}
	}
	if n, _ := strconv.Atoi(after.retryAfter); n < 60 {
		t.Errorf("Retry-After %q after the restart, want the rest of openSeconds (about 120s less the restart)", after.retryAfter)
	}
	time.Sleep(time.Second) // a status write, if the restart made one, has landed
	if e := breakerEntry(t, env, policy, localcluster.GatewayName); e != tripped {
		t.Errorf("status entry after the restart: %+v, want it unchanged: %+v", e, tripped)
	}
	out, err := rampart(t, env, "gateway", "breaker", "status")
	if err != nil || !regexpMatch(policy+`\s+false\s+`+localcluster.GatewayName+`\s+Open\s+.*tripped: p90 latency`, out) {
		t.Errorf("rampart gateway breaker status after the restart: %v\n%s", err, out)
	}

	// Opened by hand, it comes back open whatever its status said.
	if out, err := rampart(t, env, "gateway", "breaker", "open", "--policy", policy); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitBreakerStateOf(t, env, policy, localcluster.GatewayName, "Open", 20*time.Second)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(breakerEntry(t, env, policy, localcluster.GatewayName).Reason, "opened by hand"), nil
	})
	if err != nil {
		t.Fatalf("status after breaker open: %+v", breakerEntry(t, env, policy, localcluster.GatewayName))
	}
	restart()
	if a := get(t, user, url); a.code != http.StatusTooManyRequests || !strings.Contains(a.message, "opened by hand") {
		t.Errorf("first answer after a restart with the breaker open by hand: %+v", a)
	}

	// Closed by hand, the requests come back (through the ramp).
	if out, err := rampart(t, env, "gateway", "breaker", "close", "--policy", policy); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitBreakerState(t, env, policy, "Closed", 20*time.Second)
	if a := get(t, user, url); a.code != http.StatusOK {
		t.Errorf("closed: %+v", a)
	}
}
