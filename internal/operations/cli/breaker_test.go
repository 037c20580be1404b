package cli_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rampart-io/rampart/internal/operations/cli"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// The way out works when it matters: on a cluster started as the README
// says (`rampart up --apiservers 2 --gateway`, default TrafficPolicies),
// with rampart-default's breaker open, a kubectl with an empty discovery
// cache and `rampart gateway breaker close` reach the breaker through the
// gateway while the gateway still refuses everyone's ordinary requests.
func TestBreakerClosesThroughTheGatewayFromAColdClient(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a local cluster")
	}
	assets, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	if out, err := exec.Command(rampart, "up", "--detach", "--dir", dir, "--nodes", "1", "--apiservers", "2", "--gateway", "--assets", assets).CombinedOutput(); err != nil {
		t.Fatalf("rampart up: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(rampart, "down", "--dir", dir).Run() })
	direct, viaGateway := filepath.Join(dir, "kubeconfig"), filepath.Join(dir, "kubeconfig-gateway")
	// A user with no ~/.kube: no discovery cache, no default kubeconfig.
	home := t.TempDir()
	run := func(name string, env []string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), append([]string{"HOME=" + home}, env...)...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("%s %s: %s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		return string(out), err
	}
	if out, err := run(rampart, nil, "gateway", "breaker", "open", "--policy", "rampart-default", "--kubeconfig", direct); err != nil {
		t.Fatalf("breaker open: %v\n%s", err, out)
	}
	// Ordinary requests through the gateway are refused: the breaker is
	// really open for the admin too.
	cfg, err := clientcmd.BuildConfigFromFlags("", viaGateway)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := func() (int, string) {
		resp, err := hc.Get(cfg.Host + "/api/v1/namespaces/default/configmaps")
		if err != nil {
			t.Fatalf("LIST configmaps through the gateway: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	var code int
	var body string
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body = configMaps()
		return code == http.StatusTooManyRequests, nil
	})
	if err != nil || !strings.Contains(body, "rampart gateway breaker close --policy rampart-default") {
		t.Fatalf("the open breaker does not refuse the admin's LIST through the gateway: %d %s", code, body)
	}

	// kubectl from a cold cache: discovery (/api, /apis), the resource,
	// and OpenAPI (explain) all pass.
	kubectl := filepath.Join(assets, "kubectl")
	cache := filepath.Join(t.TempDir(), "kube-cache")
	out, err := run(kubectl, nil, "--kubeconfig", viaGateway, "--cache-dir", cache, "get", "trafficpolicies")
	if err != nil || !strings.Contains(out, "rampart-default") {
		t.Errorf("cold kubectl get trafficpolicies through the gateway: %v\n%s", err, out)
	}
	out, err = run(kubectl, nil, "--kubeconfig", viaGateway, "--cache-dir", filepath.Join(t.TempDir(), "kube-cache"), "explain", "trafficpolicy.spec.breaker.open")
	if err != nil || !strings.Contains(out, "breaker") {
		t.Errorf("cold kubectl explain through the gateway (OpenAPI): %v\n%s", err, out)
	}

	// The command the refusal names, as it names it: KUBECONFIG set to the
	// gateway's, nothing cached.
	out, err = run(rampart, []string{"KUBECONFIG=" + viaGateway}, "gateway", "breaker", "close", "--policy", "rampart-default")
	if err != nil || !strings.Contains(out, "breaker closed") {
		t.Fatalf("rampart gateway breaker close through the gateway: %v\n%s", err, out)
	}
	// Closed, the admin's requests come back (over the 30 s ramp).
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		code, body = configMaps()
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the admin's LIST through the gateway after the close: %d %s", code, body)
	}
}

// A refusal reaches the operator at once, with its reason and where it
// came from, instead of after client-go's ten retries of Retry-After.
func TestBreakerCommandReportsARefusalWithoutRetrying(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,`+
			`"message":"TrafficPolicy \"strict\" refuses this request"}`)
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: `+srv.URL+`}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: t}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	root := cli.NewRoot()
	var out strings.Builder
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"gateway", "breaker", "close", "--policy", "rampart-default", "--kubeconfig", kubeconfig})
	err := root.ExecuteContext(context.Background())
	if err == nil {
		t.Fatalf("breaker close against a refusing server succeeded:\n%s", out.String())
	}
	for _, want := range []string{srv.URL, "429", `TrafficPolicy "strict" refuses this request`, "reaches an API server directly"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the server saw %d requests, want 1: a refusal must not be retried", n)
	}
}
