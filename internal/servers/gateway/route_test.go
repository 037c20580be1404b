package gateway

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// namedServer is an API server stand-in that answers with its name.
func namedServer(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, name)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestRoutedRequestsReachTheirPool: through the whole gateway (guards,
// proxy, transport), a Route policy's requests are answered by its pool's
// API server and nobody else's requests are; with the pool down, Reject
// answers 503 and Default is answered by the default pool; a policy naming
// a pool the gateway lacks is left out, and its requests are judged by the
// next policy (here: none, the default pool).
func TestRoutedRequestsReachTheirPool(t *testing.T) {
	a, b, heavy := namedServer(t, "a"), namedServer(t, "b"), namedServer(t, "heavy")
	// httptest's servers share one certificate.
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})
	var trafficLog bytes.Buffer
	g := guardedGatewayOf(t, &rest.Config{Host: a.URL, BearerToken: "gateway", TLSClientConfig: rest.TLSClientConfig{CAData: ca}},
		Options{Upstreams: []string{a.URL, b.URL}, UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{heavy.URL}}}, TrafficLog: &trafficLog})
	// The storm's LISTs of pods, by user stormy.
	lists := []v1alpha1.TrafficMatch{{Subjects: v1alpha1.Subjects{Users: []string{"stormy"}}, Verbs: []string{"list"},
		Resources: []v1alpha1.TrafficResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}}
	ps := []traffic.Policy{
		{Name: "storm-to-heavy", Spec: v1alpha1.TrafficPolicySpec{Precedence: 10, Match: lists, Action: v1alpha1.ActionRoute,
			Route: &v1alpha1.TrafficRoute{Pool: "heavy", OnUnavailable: v1alpha1.RouteReject}}},
		{Name: "typo", Spec: v1alpha1.TrafficPolicySpec{Precedence: 5, Match: []v1alpha1.TrafficMatch{{Subjects: v1alpha1.Subjects{Users: []string{"judy"}}}},
			Action: v1alpha1.ActionRoute, Route: &v1alpha1.TrafficRoute{Pool: "haevy"}}},
	}
	kept, unknown := traffic.WithKnownPools(ps, func(name string) bool { return g.pools.Named(name) != nil })
	g.policies.Store(&kept)
	if len(unknown) != 1 || unknown[0].Name != "typo" {
		t.Fatalf("left out %v, want typo", unknown)
	}
	answer := func(r *http.Request) (int, string) {
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		body, _ := io.ReadAll(w.Body)
		return w.Code, string(body)
	}

	for range 5 {
		if code, body := answer(get("stormy", pods)); code != 200 || body != "heavy" {
			t.Fatalf("the storm's LIST answered %d by %q, want 200 by heavy", code, body)
		}
		// The same client's other requests, and other clients, stay on
		// the default pool.
		if code, body := answer(get("stormy", pods+"/web-1")); code != 200 || body == "heavy" {
			t.Fatalf("the storm's GET answered %d by %q, want the default pool", code, body)
		}
		if code, body := answer(get("alice", pods)); code != 200 || body == "heavy" {
			t.Fatalf("alice's LIST answered %d by %q, want the default pool", code, body)
		}
		if code, body := answer(get("judy", pods)); code != 200 || body == "heavy" {
			t.Fatalf("a request of the policy naming an unknown pool answered %d by %q, want the default pool", code, body)
		}
	}
	// The breakers judge the default pool's answers only.
	if n := g.breakers.set.Window.Summarize(time.Now(), 60).Answers; n != 15 {
		t.Errorf("the breakers' window holds %d answers, want the default pool's 15", n)
	}
	metrics := scrapeRegistry(t, g)
	for _, want := range []string{
		`rampart_gateway_routed_requests_total{outcome="routed",policy="storm-to-heavy",pool="heavy"} 5`,
		`rampart_gateway_upstream_requests_total{pool="heavy",upstream="` + strings.TrimPrefix(heavy.URL, "https://") + `"} 5`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// Down: Reject refuses, naming the policy and the pool.
	hp := g.pools.Named("heavy")
	hp.Checked(hp.Servers[0], false, time.Now())
	code, body := answer(get("stormy", pods))
	var st metav1.Status
	_ = json.Unmarshal([]byte(body), &st)
	if code != http.StatusServiceUnavailable || !strings.Contains(st.Message, `TrafficPolicy "storm-to-heavy"`) || !strings.Contains(st.Message, `pool "heavy"`) ||
		st.Details == nil || st.Details.RetryAfterSeconds < 5 {
		t.Errorf("with its pool down the storm's LIST got %d %+v, want 503 naming the policy and the pool, with a Retry-After", code, st)
	}
	// Default falls back.
	ps[0].Spec.Route.OnUnavailable = v1alpha1.RouteToDefault
	kept, _ = traffic.WithKnownPools(ps, func(name string) bool { return g.pools.Named(name) != nil })
	g.policies.Store(&kept)
	if code, body := answer(get("stormy", pods)); code != 200 || body == "heavy" {
		t.Errorf("with its pool down and onUnavailable Default, the storm's LIST answered %d by %q, want the default pool", code, body)
	}
	metrics = scrapeRegistry(t, g)
	for _, want := range []string{
		`rampart_gateway_routed_requests_total{outcome="refused",policy="storm-to-heavy",pool="heavy"} 1`,
		`rampart_gateway_routed_requests_total{outcome="fallback",policy="storm-to-heavy",pool="default"} 1`,
		`rampart_gateway_rejections_total{policy="storm-to-heavy",reason="pool-unavailable"} 1`,
		`rampart_gateway_upstream_weight{pool="heavy",upstream="` + strings.TrimPrefix(heavy.URL, "https://") + `"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The traffic log names the pool of routed requests only (not of
	// the fallback, nor of the refusal).
	if err := g.traffic.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(trafficLog.String(), `"pool":"heavy"`); n != 5 {
		t.Errorf("%d traffic log lines name pool heavy, want the 5 routed LISTs:\n%s", n, trafficLog.String())
	}
}

// scrapeRegistry is the gateway's metrics in the text format.
func scrapeRegistry(t *testing.T, g *Gateway) string {
	t.Helper()
	w := httptest.NewRecorder()
	g.MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return w.Body.String()
}

// TestPolicyFence: a wait returns once the watch has applied the
// resourceVersion (or a later one), and not before; it gives up after its
// timeout. Only writes of a TrafficPolicy's spec are fenced.
func TestPolicyFence(t *testing.T) {
	f := newPolicyFence("")
	obj := func(rv string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetResourceVersion(rv)
		return u
	}
	f.apply(obj("10"))
	if !f.wait(t.Context(), 10, time.Millisecond) || !f.wait(t.Context(), 9, time.Millisecond) {
		t.Error("an applied resourceVersion waited for")
	}
	if f.wait(t.Context(), 11, 10*time.Millisecond) {
		t.Error("a resourceVersion not applied yet passed")
	}
	done := make(chan bool)
	go func() { done <- f.wait(t.Context(), 12, time.Minute) }()
	f.apply(obj("11"))
	f.apply(cache.DeletedFinalStateUnknown{Obj: obj("13")})
	if !<-done {
		t.Error("the wait did not end when a later resourceVersion was applied")
	}
	for path, want := range map[string]bool{
		"POST /apis/rampart.io/v1alpha1/trafficpolicies":                    true,
		"PATCH /apis/rampart.io/v1alpha1/trafficpolicies/heavy":             true,
		"DELETE /apis/rampart.io/v1alpha1/trafficpolicies/heavy":            true,
		"PUT /apis/rampart.io/v1alpha1/trafficpolicies/heavy/status":        false,
		"GET /apis/rampart.io/v1alpha1/trafficpolicies/heavy":               false,
		"POST /apis/rampart.io/v1alpha1/namespaces/x/podunavailablebudgets": false,
	} {
		method, url, _ := strings.Cut(path, " ")
		r := httptest.NewRequest(method, "https://gateway"+url, nil)
		if got := policyWrite(traffic.FromInfo(traffic.Info(r), r.URL)); got != want {
			t.Errorf("policyWrite(%s) = %v, want %v", path, got, want)
		}
	}
}

// TestLeftOutPoliciesReported: a Route policy naming a pool the gateway
// lacks is logged once per generation, and shown by
// rampart_gateway_policies_left_out while it is left out.
func TestLeftOutPoliciesReported(t *testing.T) {
	var log bytes.Buffer
	g := guardedGateway(t)
	g.log = slog.New(slog.NewTextHandler(&log, nil))
	l := &leftOutPolicies{g: g, logged: map[string]int64{}}
	typo := traffic.Policy{Name: "typo", Generation: 1, Spec: v1alpha1.TrafficPolicySpec{Action: v1alpha1.ActionRoute, Route: &v1alpha1.TrafficRoute{Pool: "haevy"}}}
	l.report([]traffic.Policy{typo})
	l.report([]traffic.Policy{typo})
	series := `rampart_gateway_policies_left_out{policy="typo",reason="unknown-pool"} 1`
	if n := strings.Count(log.String(), "TrafficPolicy left out"); n != 1 || !strings.Contains(log.String(), "--upstream-pool haevy=URL") {
		t.Errorf("logged %d times, want once naming the flag:\n%s", n, log.String())
	}
	if !strings.Contains(scrapeRegistry(t, g), series) {
		t.Errorf("metrics lack %s", series)
	}
	typo.Generation = 2
	l.report([]traffic.Policy{typo})
	if n := strings.Count(log.String(), "TrafficPolicy left out"); n != 2 {
		t.Errorf("a new generation logged: %d lines, want 2", n)
	}
	l.report(nil)
	if strings.Contains(scrapeRegistry(t, g), "rampart_gateway_policies_left_out{") {
		t.Error("a policy no longer left out is still shown")
	}
}
