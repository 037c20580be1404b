package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestUpDetachAndDown drives the binary as a user would: `rampart up
// --detach`, use the kubeconfig it prints, `rampart down`, and nothing of
// the cluster keeps running.
func TestUpDetachAndDown(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a local cluster")
	}
	assets, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	up := exec.Command(rampart, "up", "--detach", "--dir", dir, "--nodes", "2", "--assets", assets)
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("rampart up: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if !strings.Contains(string(out), "Kubeconfig: "+kubeconfig) {
		t.Errorf("up did not print the kubeconfig path:\n%s", out)
	}
	pids := recordedPIDs(t, dir)
	if len(pids) != 6 {
		t.Errorf("up recorded %d processes, want 6 (etcd, apiserver, controller-manager, scheduler, kwok, manager)", len(pids))
	}
	t.Cleanup(func() { _ = exec.Command(rampart, "down", "--dir", dir).Run() })

	// The detached cluster outlives `up`, and the printed kubeconfig works.
	kubectl := filepath.Join(assets, "kubectl")
	nodes, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name").CombinedOutput()
	if err != nil || strings.Count(string(nodes), "node/") != 2 {
		t.Fatalf("kubectl get nodes after up --detach: %v\n%s", err, nodes)
	}
	// The first thing to try, as printed by up.
	run := func(args ...string) (string, error) {
		o, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		return string(o), err
	}
	if o, err := run("create", "namespace", "demo"); err != nil {
		t.Fatal(o)
	}
	if o, err := run("label", "namespace", "demo", "rampart.io/protection=Always"); err != nil {
		t.Fatal(o)
	}
	if o, err := run("delete", "namespace", "demo"); err == nil || !strings.Contains(o, "rampart.io/protection") {
		t.Fatalf("delete of the protected demo namespace: err=%v\n%s", err, o)
	}

	// status lists the protected namespace and the denial: as an Event
	// when the webhook judged it, or counted against the compiled policy
	// when the API server did (once the manager has put it in force, about
	// a second after start).
	var status []byte
	byWebhook := []string{"DeleteDenied", "protection=Always denied DELETE by rampart-admin"}
	byAPIServer := regexp.MustCompile(`(?m)^deletion\.rampart\.io\s+labels\s+Deny\s+[1-9]`)
	judged := func() bool {
		return strings.Contains(string(status), byWebhook[0]) && strings.Contains(string(status), byWebhook[1]) || byAPIServer.Match(status)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		status, err = exec.Command(rampart, "status", "--kubeconfig", kubeconfig).CombinedOutput()
		if err == nil && judged() {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{"namespaces", "demo", "Always"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("rampart status lacks %q:\n%s", want, status)
		}
	}
	if !judged() {
		t.Errorf("rampart status shows the denial neither as an Event nor in the compiled policy's count:\n%s", status)
	}
	if strings.Contains(string(status), "probe.compiled.rampart.io") {
		t.Errorf("rampart status lists the manager's probe as a policy:\n%s", status)
	}

	// A second up in the same dir refuses instead of clobbering it.
	again, err := exec.Command(rampart, "up", "--detach", "--dir", dir, "--assets", assets).CombinedOutput()
	if err == nil || !strings.Contains(string(again), "rampart down --dir") {
		t.Errorf("second up in a running dir: err=%v\n%s", err, again)
	}

	down, err := exec.Command(rampart, "down", "--dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("rampart down: %v\n%s", err, down)
	}
	for _, pid := range pids {
		if clustertest.ProcessAlive(pid) {
			t.Errorf("pid %d still runs after down", pid)
		}
	}
}

func TestUpWithoutAssetsNamesMakeAssets(t *testing.T) {
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rampart, "up", "--dir", t.TempDir(), "--assets", t.TempDir()).CombinedOutput()
	if err == nil {
		t.Fatal("up without assets succeeded")
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "make assets") {
		t.Fatalf("up without assets said %q, want one line naming `make assets`", out)
	}
}

func recordedPIDs(t *testing.T, dir string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "processes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range s.Processes {
		pids = append(pids, p.PID)
	}
	return pids
}
