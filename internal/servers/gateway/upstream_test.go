package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// With one of the two API servers crashed, every request through the
// gateway still succeeds and the cluster keeps scheduling and running
// pods; once the API server is back it is eased in (slow start), not
// handed a full share at once.
func TestAPIServerOutageAndSlowStartReturn(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	second := strings.TrimPrefix(env.APIServerURLs()[1], "https://")
	weight := `rampart_gateway_upstream_weight{pool="default",upstream="` + second + `"}`
	if w := metric(scrape(t, env), weight); w != 1 {
		t.Fatalf("second API server's weight %v before the outage, want 1", w)
	}

	// A crash, not a graceful stop: connections reset, no /readyz warning.
	if err := env.KillComponent(localcluster.APIServerName(1)); err != nil {
		t.Fatal(err)
	}
	client := clientFor(t, viaGateway(t, env))
	for i := range 100 {
		if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Fatalf("GET %d through the gateway with one API server down: %v", i, err)
		}
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("written-during-outage"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create through the gateway with one API server down: %v", err)
	}
	runDeployment(t, env, ns, "during-outage", 2)
	if w := metric(scrape(t, env), weight); w != 0 {
		t.Errorf("stopped API server's weight %v, want 0 (out of rotation)", w)
	}

	if err := env.StartAPIServer(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var first float64
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		first = metric(scrape(t, env), weight)
		return first > 0, nil
	})
	if err != nil {
		t.Fatal("the restarted API server never came back into rotation")
	}
	if first >= 0.5 {
		t.Errorf("restarted API server came back with weight %v, want a small share first (slow start)", first)
	}
	requests := `rampart_gateway_upstream_requests_total{pool="default",upstream="` + second + `"}`
	before := metric(scrape(t, env), requests)
	// Under load it takes its (small) share at once: bursts of concurrent
	// requests keep the other busy enough.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() { _, _ = client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}) })
		}
		wg.Wait()
		return metric(scrape(t, env), requests) > before, nil
	})
	if err != nil {
		t.Fatal("the restarted API server is back in rotation but receives no requests")
	}
}
