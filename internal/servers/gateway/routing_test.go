package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// A Route policy created through the gateway applies to the very next
// request, with no sleep and no poll between them: the LIST right after
// the create reaches the API server of pool heavy (its own audit log
// records it, the first API server's does not), and the LIST right after
// the delete is back on the default pool. The cluster's own gateway, which
// has no pool heavy, leaves the policy out and says so.
func TestRoutePolicyAppliesToTheNextRequest(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	urls := env.APIServerURLs()
	cfg, g := inProcessGateway(t, env, gateway.Options{Upstreams: urls[:1],
		UpstreamPools: []gateway.UpstreamPool{{Name: "heavy", URLs: urls[1:2]}}})
	admin := clientFor(t, cfg)
	// Each LIST is marked by its label selector, to be found in the
	// audit logs.
	list := func(mark string) {
		t.Helper()
		if _, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "route-test=" + mark}); err != nil {
			t.Fatalf("LIST %s through the gateway: %v", mark, err)
		}
	}
	heavy := `rampart_gateway_upstream_requests_total{pool="heavy",upstream="` + strings.TrimPrefix(urls[1], "https://") + `"}`
	sentToHeavy := func() float64 { return metric(registryText(t, g), heavy) }

	list("before")
	if n := sentToHeavy(); n != 0 {
		t.Fatalf("%g requests reached pool heavy before any policy routes there", n)
	}

	name := "t-route-" + ns
	policies := dynamicFor(t, cfg).Resource(gateway.TrafficPolicies)
	policy := trafficPolicy(t, name, `{precedence: 1, action: Route, route: {pool: heavy, onUnavailable: Reject}, match: [{groups: ["rampart:gateway-admins"], verbs: [list], resources: [{apiGroups: [""], resources: [configmaps]}], namespaces: [`+ns+`]}]}`)
	if _, err := policies.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(gateway.TrafficPolicies).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	list("routed")
	if n := sentToHeavy(); n != 1 {
		t.Fatalf("%g requests reached pool heavy right after the Route policy was created, want the LIST", n)
	}
	if n := metric(registryText(t, g), `rampart_gateway_routed_requests_total{outcome="routed",policy="`+name+`",pool="heavy"}`); n != 1 {
		t.Errorf("routed requests of the policy: %g, want 1", n)
	}
	// What the API servers themselves recorded.
	auditHas := func(file, mark string) bool {
		data, _ := os.ReadFile(filepath.Join(env.Dir, file))
		return strings.Contains(string(data), "route-test%3D"+mark)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return auditHas("audit-1.log", "routed"), nil
	}); err != nil {
		t.Error("the routed LIST is not in the second API server's audit log")
	}
	if auditHas("audit.log", "routed") || !auditHas("audit.log", "before") {
		t.Error("the first API server's audit log has the routed LIST, or lacks the one before the policy")
	}

	// The cluster's gateway has no pool heavy: it leaves the policy out.
	leftOut := `rampart_gateway_policies_left_out{policy="` + name + `",reason="unknown-pool"}`
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return metric(scrape(t, env), leftOut) == 1, nil
	}); err != nil {
		t.Errorf("the cluster's gateway, without pool heavy, does not report the policy left out (%s)", leftOut)
	}

	if err := policies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	list("after")
	if n := sentToHeavy(); n != 1 {
		t.Errorf("%g requests reached pool heavy, want still 1: the LIST right after the delete went there too", n)
	}
}

// registryText is an in-process gateway's metrics in the text format.
func registryText(t testing.TB, g *gateway.Gateway) string {
	t.Helper()
	w := httptest.NewRecorder()
	g.MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return w.Body.String()
}

func dynamicFor(t testing.TB, cfg *rest.Config) *dynamic.DynamicClient {
	t.Helper()
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
