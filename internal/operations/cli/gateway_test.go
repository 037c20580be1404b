package cli_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// `rampart up --apiservers 2 --gateway` starts two API servers and the
// gateway, prints DIR/kubeconfig-gateway, which works, keeps
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
	out, err := exec.Command(rampart, "up", "--detach", "--dir", dir, "--nodes", "1", "--unprotected", "--apiservers", "2", "--gateway", "--assets", assets).CombinedOutput()
	if err != nil {
		t.Fatalf("rampart up: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(rampart, "down", "--dir", dir).Run() })
	viaGateway := filepath.Join(dir, "kubeconfig-gateway")
	if !strings.Contains(string(out), viaGateway) {
		t.Errorf("up did not print the gateway kubeconfig:\n%s", out)
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
