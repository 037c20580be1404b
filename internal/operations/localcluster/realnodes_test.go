package localcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

func TestRealNodePrerequisitesNameTheFix(t *testing.T) {
	err := localcluster.CheckRealNodePrerequisites(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "kubelet") || !strings.Contains(err.Error(), "make assets") {
		t.Fatalf("CheckRealNodePrerequisites of an empty assets directory = %v, want the kubelet named with make assets", err)
	}
}

// Two real nodes of one cluster run side by side (their own ports,
// sockets, bridges and subnets), each runs a pod that kubectl exec
// reaches, and stopping the cluster
// leaves no container, shim, mount or bridge of theirs behind.
func TestRealNodesRunSideBySideAndStopCompletely(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 1})
	nodes := env.RealNodes(t, 2)
	ns := env.Namespace(t)
	ctx := context.Background()
	for _, node := range nodes {
		pod := localcluster.RealNodePod("on-"+node, map[string]string{"app": "side-by-side"}, map[string]string{"kubernetes.io/hostname": node})
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := env.WaitPodsRunning(t, ns, "app=side-by-side", 2, time.Minute)
	ips := map[string]bool{}
	for _, p := range pods {
		ips[p.Status.PodIP] = true
	}
	if len(ips) != 2 {
		t.Errorf("the two real nodes' pods have IPs %v, want two distinct ones", ips)
	}
	// The API server reaches each kubelet (exec, logs) with its client
	// certificate, through the node guard to containerd.
	for _, p := range pods {
		out, err := env.Kubectl(t, "exec", "-n", ns, p.Name, "--", "echo", "hello from "+p.Spec.NodeName)
		if err != nil || strings.TrimSpace(out) != "hello from "+p.Spec.NodeName {
			t.Errorf("kubectl exec in %s on %s: %v: %q", p.Name, p.Spec.NodeName, err, out)
		}
	}
	var shortDirs []string
	for _, node := range nodes {
		socket, err := env.RealNodeRuntime(node)
		if err != nil {
			t.Fatal(err)
		}
		shortDirs = append(shortDirs, filepath.Dir(socket)+"/")
	}
	if err := env.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), filepath.Join(env.Dir, "real-nodes")) {
		t.Errorf("mounts left under %s after stop", filepath.Join(env.Dir, "real-nodes"))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, dir := range shortDirs {
		// The node's short path (a link to its directory) is released.
		if _, err := os.Lstat(strings.TrimSuffix(dir, "/")); !os.IsNotExist(err) {
			t.Errorf("%s still reserved after stop (%v)", dir, err)
		}
		for _, f := range procs {
			cmdline, _ := os.ReadFile(f)
			if strings.Contains(string(cmdline), dir) {
				t.Errorf("a process of the stopped real nodes still runs: %s", strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
	}
}
