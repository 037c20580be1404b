// Package clustertest gives integration tests a real local cluster, started
// by the same package as `rampart up` (internal/operations/localcluster): once per test
// package from TestMain, or per test for tests that stop components.
package clustertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// Env is a running cluster with clients for a test.
type Env struct {
	*localcluster.Cluster
	Client  kubernetes.Interface
	Dynamic dynamic.Interface

	// realNodes serialises the tests that ask for real nodes.
	realNodes sync.Mutex
}

var (
	shared    *Env
	sharedErr error
)

// Main starts one cluster for the test package, runs its tests and stops the
// cluster. With -short it starts nothing and integration tests skip. The
// cluster's directory (logs included) is kept when a test fails.
func Main(m *testing.M, opts localcluster.Options) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rampart-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	shared, sharedErr = start1(dir, opts)
	if sharedErr == nil {
		fmt.Fprintf(os.Stderr, "clustertest: local cluster ready in %.1fs (%s)\n", time.Since(start).Seconds(), dir)
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "clustertest: stopping cluster:", err)
			code = 1
		}
	}
	archiveLogs(dir)
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "clustertest: cluster state and logs kept in %s\n", dir)
	}
	os.Exit(code)
}

// Get returns the package's cluster; it skips in -short mode and fails the
// test if the cluster did not start.
func Get(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs a local cluster (run without -short)")
	}
	if sharedErr != nil {
		t.Fatalf("local cluster did not start: %v", sharedErr)
	}
	if shared == nil {
		t.Fatal("clustertest.Get needs clustertest.Main in TestMain")
	}
	return shared
}

// Start starts a cluster of the test's own, stopped when the test ends; for
// tests that stop components or need another configuration.
func Start(t testing.TB, opts localcluster.Options) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs a local cluster (run without -short)")
	}
	dir := t.TempDir()
	env, err := start1(dir, opts)
	if err != nil {
		t.Fatalf("start local cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop local cluster: %v", err)
		}
		archiveLogs(dir)
		if t.Failed() {
			keepLogs(t, dir)
		}
	})
	return env
}

// keepLogs copies a failed test's component logs out of its TempDir, which
// the testing package removes.
func keepLogs(t testing.TB, dir string) {
	keep, err := os.MkdirTemp("", "rampart-failed-")
	if err != nil {
		return
	}
	if err := exec.Command("cp", "-r", filepath.Join(dir, "logs"), keep).Run(); err == nil {
		t.Logf("component logs kept in %s", keep)
	}
}

// archiveLogs copies a stopped cluster's logs, and the keys that must not
// appear in them, into $RAMPART_TEST_LOGS when it is set: `make test`
// greps the logs of the whole run for secrets (hack/secret-scan.sh).
func archiveLogs(dir string) {
	to := os.Getenv("RAMPART_TEST_LOGS")
	if to == "" {
		return
	}
	keep := filepath.Join(to, filepath.Base(dir))
	if err := os.MkdirAll(keep, 0o700); err != nil {
		return
	}
	args := []string{"-r"}
	for _, name := range []string{"logs", "pki", "manager", "*.log"} {
		found, _ := filepath.Glob(filepath.Join(dir, name))
		args = append(args, found...)
	}
	if out, err := exec.Command("cp", append(args, keep)...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "clustertest: archiving logs: %v: %s\n", err, out)
	}
}

func start1(dir string, opts localcluster.Options) (*Env, error) {
	assets, rampart, err := Binaries()
	if err != nil {
		return nil, err
	}
	opts.Dir, opts.Assets, opts.Rampart = dir, assets, rampart
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	cs, err := c.Clientset()
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		_ = c.Stop()
		return nil, err
	}
	return &Env{Cluster: c, Client: cs, Dynamic: dyn}, nil
}

var (
	buildOnce    sync.Once
	builtRampart string
	buildErr     error
)

// Binaries finds bin/k8s and bin/rampart: from RAMPART_ASSETS and
// RAMPART_BIN (what `make test` sets), else in the repository, building
// bin/rampart when it is missing so that `go test ./...` works alone.
func Binaries() (assets, rampart string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	assets = os.Getenv("RAMPART_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	rampart = os.Getenv("RAMPART_BIN")
	if rampart != "" {
		return assets, rampart, nil
	}
	buildOnce.Do(func() {
		builtRampart = filepath.Join(root, "bin", "rampart")
		cmd := exec.Command("go", "build", "-o", builtRampart, "./cmd/rampart")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/rampart: %v\n%s", err, out)
		}
	})
	return assets, builtRampart, buildErr
}

// Assets finds bin/k8s as Binaries does and makes sure it has names: when
// one is missing from the repository's bin/k8s (RAMPART_ASSETS unset), it
// builds group with hack/assets.sh first, as the storage tests build their
// S3 server. `make up` builds only the cluster group; a test of the chart
// or of real nodes run alone after it builds what it needs.
func Assets(group string, names ...string) (string, error) {
	assets, _, err := Binaries()
	if err != nil {
		return "", err
	}
	var missing []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(assets, n)); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return assets, nil
	}
	if os.Getenv("RAMPART_ASSETS") != "" {
		return "", fmt.Errorf("RAMPART_ASSETS=%s lacks %s: build it with make assets", assets, strings.Join(missing, ", "))
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", "hack/assets.sh", group)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s (bash hack/assets.sh %s): %v\n%s", strings.Join(missing, ", "), group, err, out)
	}
	return assets, nil
}

// ImageArchive finds the chart's image, `make image`'s OCI archive: from
// RAMPART_IMAGE (what `make test` sets, having run make image), else the
// repository's bin/rampart-image.tar, built with make image when missing
// so that a real-node test run alone works.
func ImageArchive() (string, error) {
	if archive := os.Getenv("RAMPART_IMAGE"); archive != "" {
		if _, err := os.Stat(archive); err != nil {
			return "", fmt.Errorf("RAMPART_IMAGE: %w (build it with make image)", err)
		}
		return archive, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	archive := filepath.Join(root, "bin", "rampart-image.tar")
	if _, err := os.Stat(archive); err == nil {
		return archive, nil
	}
	cmd := exec.Command("make", "image")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make image: %v\n%s", err, out)
	}
	return archive, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if data, _ := os.ReadFile(filepath.Join(dir, "go.mod")); strings.HasPrefix(string(data), "module github.com/rampart-io/rampart\n") {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the rampart repository")
		}
		dir = parent
	}
}

// Namespace creates a namespace for the test, deleted when it ends.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := "t-" + strings.ToLower(rand.String(8))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rampart.io/test": sanitize(t.Name())}}}
	if _, err := e.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// sanitize makes a test name a valid label value.
func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-._")
}

// AddNodes adds n simulated nodes and waits until they are Ready.
func (e *Env) AddNodes(t testing.TB, n int) {
	t.Helper()
	if err := e.Cluster.AddNodes(context.Background(), n); err != nil {
		t.Fatalf("add %d nodes: %v", n, err)
	}
}

// RealNodes makes sure the cluster has at least n real kubelet nodes
// (containerd, runc, rampart node-guard; see localcluster/realnodes.go),
// starting the missing ones, and returns their names. Only -short skips:
// a machine without the prerequisites fails the test with what to install,
// because make test must run these (.ci/run installs them).
func (e *Env) RealNodes(t testing.TB, n int) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real kubelet nodes (run without -short)")
	}
	e.realNodes.Lock()
	defer e.realNodes.Unlock()
	if missing := n - len(e.Cluster.RealNodes()); missing > 0 {
		if _, err := Assets("nodes", "kubelet", "runc"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := e.AddRealNodes(ctx, missing); err != nil {
			t.Fatalf("start %d real nodes: %v", missing, err)
		}
		t.Logf("%d real nodes Ready in %.1fs", missing, time.Since(start).Seconds())
	}
	return e.Cluster.RealNodes()[:n]
}

// WaitPodsRunning waits until exactly n pods match selector in ns and all
// run on a node, and returns them.
func (e *Env) WaitPodsRunning(t testing.TB, ns, selector string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		running := 0
		var others []string
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				running++
				continue
			}
			// What the others are, to tell a slow scheduler from a pod
			// stuck terminating when the wait fails.
			others = append(others, fmt.Sprintf("%s %s node=%q deleting=%t owner=%v", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil, ownerNames(p.OwnerReferences)))
		}
		last = fmt.Sprintf("%d pods, %d running; not running: %v", len(list.Items), running, others)
		pods = list.Items
		return len(list.Items) == n && running == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d running pods %q in %s: %s: %v", n, selector, ns, last, err)
	}
	return pods
}

// ProcessAlive reports whether pid runs (a zombie does not).
func ProcessAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// Kubectl runs the cluster's kubectl with the admin kubeconfig and returns
// its combined output.
func (e *Env) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(e.KubectlPath(), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func ownerNames(refs []metav1.OwnerReference) []string {
	var names []string
	for _, r := range refs {
		names = append(names, r.Kind+"/"+r.Name)
	}
	return names
}

// Containers lists every container of a real node's containerd, asked
// past the node guard: what really runs, whatever the API says.
func (e *Env) Containers(t testing.TB, node string) []localcluster.RuntimeContainer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := e.RuntimeContainers(ctx, node)
	if err != nil {
		t.Fatalf("ask containerd on %s: %v", node, err)
	}
	return all
}
