package admission_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// The local cluster serves the manager's metrics as the chart does and
// docs/install-and-operations.md says: over HTTPS, to callers the API server allows to get
// /metrics (rampart-metrics-reader), and to nobody else.
func TestManagerMetricsAreServedOnlyToReaders(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	url := env.MetricsURL()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("manager metrics at %s, want HTTPS", url)
	}
	hc, err := env.MetricsHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	status := func(token string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("scrape %s: %v", url, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status(""); code != http.StatusUnauthorized {
		t.Errorf("a scrape without credentials got %d, want 401", code)
	}
	ns := env.Namespace(t)
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code := status(tr.Status.Token); code != http.StatusForbidden {
		t.Errorf("a service account without rampart-metrics-reader got %d, want 403", code)
	}
	body, err := env.ScrapeManagerMetrics(ctx, 0)
	if err != nil {
		t.Fatalf("scrape as the reader: %v", err)
	}
	if !strings.Contains(body, "controller_runtime_webhook_requests_total") {
		t.Errorf("the reader's scrape has no webhook metrics:\n%.1000s", body)
	}
}
