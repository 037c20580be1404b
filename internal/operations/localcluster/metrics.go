package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// MetricsScraper is the service account in ManagerNamespace that the
// local cluster scrapes the manager's metrics as, bound to the ClusterRole
// rampart-metrics-reader as the chart tells users to bind Prometheus.
const MetricsScraper = "metrics-scraper"

// metricsScraper are the ClusterRole the chart ships for reading the
// manager's metrics and the local scraper's account bound to it.
func metricsScraper() []*unstructured.Unstructured {
	obj := func(apiVersion, kind string, meta map[string]any, rest map[string]any) *unstructured.Unstructured {
		o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
		for k, v := range rest {
			o[k] = v
		}
		return &unstructured.Unstructured{Object: o}
	}
	return []*unstructured.Unstructured{
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", map[string]any{"name": "rampart-metrics-reader"}, map[string]any{
			"rules": []any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}},
		}),
		obj("v1", "ServiceAccount", map[string]any{"name": MetricsScraper, "namespace": ManagerNamespace}, nil),
		obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", map[string]any{"name": "rampart-" + MetricsScraper}, map[string]any{
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rampart-metrics-reader"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": MetricsScraper, "namespace": ManagerNamespace}},
		}),
	}
}

// metricsScraperToken caches the scraper's bound token.
type metricsScraperToken struct {
	mu      sync.Mutex
	token   string
	expires time.Time
}

// ScrapeManagerMetrics reads manager replica i's metrics as Prometheus
// would with the chart: over HTTPS (checked against the local CA), with
// the bearer token of a service account bound to rampart-metrics-reader.
func (c *Cluster) ScrapeManagerMetrics(ctx context.Context, i int) (string, error) {
	body, err := c.getFromManager(ctx, c.ManagerMetricsURL(i), 0)
	return string(body), err
}

// ProfileManager takes a CPU profile of manager replica i for d, from the
// /debug/pprof/ its metrics address serves with --profiling (pass it in
// Options.ManagerArgs), as the scraper's account, which the caller must
// have allowed to get /debug/pprof/*.
func (c *Cluster) ProfileManager(ctx context.Context, i int, d time.Duration) ([]byte, error) {
	url := strings.TrimSuffix(c.ManagerMetricsURL(i), "/metrics") + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(d.Seconds()))
	return c.getFromManager(ctx, url, d+30*time.Second)
}

// getFromManager gets url from a manager's metrics address with the
// scraper's bearer token; timeout 0 keeps the client's.
func (c *Cluster) getFromManager(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	token, err := c.metricsToken(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	hc, err := c.MetricsHTTPClient()
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		hc.Timeout = timeout
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s: %.200s", url, resp.Status, body)
	}
	return body, nil
}

// MetricsHTTPClient trusts the local CA, which issued the manager's
// metrics certificate; it sends no credentials of its own.
func (c *Cluster) MetricsHTTPClient() (*http.Client, error) {
	ca, err := os.ReadFile(c.pkiFile("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", c.pkiFile("ca.crt"))
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

func (c *Cluster) metricsToken(ctx context.Context) (string, error) {
	c.scraper.mu.Lock()
	defer c.scraper.mu.Unlock()
	if time.Until(c.scraper.expires) > time.Minute {
		return c.scraper.token, nil
	}
	cs, err := c.Clientset()
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ManagerNamespace).CreateToken(ctx, MetricsScraper, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s: %w", ManagerNamespace, MetricsScraper, err)
	}
	c.scraper.token, c.scraper.expires = tr.Status.Token, tr.Status.ExpirationTimestamp.Time
	return c.scraper.token, nil
}
