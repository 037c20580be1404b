package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// `rampart up --apiservers 2 --gateway --gateway-pool heavy=1` starts two
// API servers and the gateway, the second API server in the gateway's pool
// heavy, prints DIR/kubeconfig-gateway, which works, and the pools, keeps
// DIR/kubeconfig direct, and `down` stops all of it.
func TestUpWithTwoAPIServersAndGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a local cluster")
	}
	assets, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := exec.Command(rampart, "up", "--detach", "--dir", dir, "--nodes", "1", "--unprotected", "--apiservers", "2", "--gateway", "--gateway-pool", "heavy=1", "--assets", assets).CombinedOutput()
	if err != nil {
		t.Fatalf("rampart up: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(rampart, "down", "--dir", dir).Run() })
	viaGateway := filepath.Join(dir, "kubeconfig-gateway")
	if !strings.Contains(string(out), viaGateway) {
		t.Errorf("up did not print the gateway kubeconfig:\n%s", out)
	}
	if !regexp.MustCompile(`pool default: https://127\.0\.0\.1:\d+\n  pool heavy: https://127\.0\.0\.1:\d+ `).Match(out) {
		t.Errorf("up did not print the gateway's pools:\n%s", out)
	}
	if log, err := os.ReadFile(filepath.Join(dir, "logs", "rampart-gateway.log")); err != nil || !strings.Contains(string(log), `"pools":[{"Name":"heavy","URLs":["https://127.0.0.1:`) {
		t.Errorf("the gateway's log does not say it serves pool heavy (%v)", err)
	}
	pids := recordedPIDs(t, dir)
	if len(pids) != 7 {
		t.Errorf("up recorded %d processes, want 7 (etcd, 2 apiservers, gateway, controller-manager, scheduler, kwok)", len(pids))
	}
	direct, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := clientcmd.LoadFromFile(viaGateway)
	if err != nil {
		t.Fatal(err)
	}
	if d, g := direct.Clusters["rampart-local"].Server, gw.Clusters["rampart-local"].Server; d == g {
		t.Errorf("kubeconfig and kubeconfig-gateway both name %s", d)
	}
	nodes, err := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", viaGateway, "get", "nodes", "-o", "name").CombinedOutput()
	if err != nil || strings.Count(string(nodes), "node/") != 1 {
		t.Fatalf("kubectl get nodes through the gateway: %v\n%s", err, nodes)
	}
	if down, err := exec.Command(rampart, "down", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("rampart down: %v\n%s", err, down)
	}
	for _, pid := range pids {
		if clustertest.ProcessAlive(pid) {
			t.Errorf("pid %d still runs after down", pid)
		}
	}
}
