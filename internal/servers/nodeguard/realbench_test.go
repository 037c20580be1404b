package nodeguard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// BenchmarkRealRuntimePassThrough times the CRI calls a kubelet makes
// most, to a real containerd (a real node of a local cluster, running 10
// pods) directly, through a guard in front of it, and through a plain byte
// pipe (two io.Copy, no HTTP/2 read at all: the floor of any proxy's hop),
// taking turns in one run, and reports each p50 and p90 and the ratios of
// the p50s to direct (the goal for the guard: at most 1.1×):
//
//	go test -run '^$' -bench RealRuntime -benchtime 3000x ./internal/servers/nodeguard/
//
// The guard runs in the benchmark's process (so that -cpuprofile sees
// it), with the informer of the node's pods from the API; the node's own
// guard serves its kubelet meanwhile, as on any node. It skips, saying
// what is missing, on a machine that cannot run real nodes.
func BenchmarkRealRuntimePassThrough(b *testing.B) {
	assets, _, err := clustertest.Binaries()
	if err == nil {
		err = localcluster.CheckRealNodePrerequisites(assets)
	}
	if err != nil {
		b.Skipf("the real-runtime benchmark runs containerd on a real node: %v", err)
	}
	env := clustertest.Start(b, localcluster.Options{Unprotected: true})
	node := env.RealNodes(b, 1)[0]
	ns := env.Namespace(b)
	ctx := context.Background()
	const pods = 10
	for i := range pods {
		p := localcluster.RealNodePod(fmt.Sprintf("bench-%02d", i), map[string]string{"app": "bench"}, map[string]string{localcluster.RealNodeLabel: "true"})
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	env.WaitPodsRunning(b, ns, "app=bench", pods, 2*time.Minute)
	socket, err := env.RealNodeRuntime(node)
	if err != nil {
		b.Fatal(err)
	}

	dir, err := os.MkdirTemp("", "ngb") // a short path for the socket
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	np := NewNodePods(env.Client, node, DefaultStaleAfter)
	runCtx, cancel := context.WithCancel(ctx)
	go np.Run(runCtx)
	g, err := New(Options{Runtime: "unix://" + socket, Pods: np, Node: node, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "guard.sock"))
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = g.Serve(runCtx, ln); close(served) }()
	pipe := bytePipe(b, socket, filepath.Join(dir, "pipe.sock"))
	directConn, guardConn, pipeConn := dial(b, socket), dial(b, filepath.Join(dir, "guard.sock")), dial(b, pipe)
	b.Cleanup(func() {
		_ = directConn.Close()
		_ = guardConn.Close()
		_ = pipeConn.Close()
		cancel()
		<-served
	})
	direct := runtimeapi.NewRuntimeServiceClient(directConn)

	// One of the bench pods' sandboxes and containers, for the status calls.
	ctrs, err := direct.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns}}})
	if err != nil || len(ctrs.GetContainers()) == 0 {
		b.Fatalf("no container of the bench pods in containerd: %v", err)
	}
	sandbox, container := ctrs.GetContainers()[0].GetPodSandboxId(), ctrs.GetContainers()[0].GetId()
	alternateEach(b, []path{{"direct", direct}, {"guard", runtimeapi.NewRuntimeServiceClient(guardConn)}, {"pipe", runtimeapi.NewRuntimeServiceClient(pipeConn)}}, []criCall{
		{"Version", version(ctx)},
		{"ListPodSandbox", func(c runtimeapi.RuntimeServiceClient) error {
			_, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		}},
		{"ListContainers", listContainers(ctx)},
		{"PodSandboxStatus", sandboxStatus(ctx, sandbox)},
		{"ContainerStatus", func(c runtimeapi.RuntimeServiceClient) error {
			_, err := c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: container})
			return err
		}},
	})
}

// bytePipe listens on at and copies each connection's bytes to and from
// a connection of its own to target, untouched.
func bytePipe(b *testing.B, target, at string) string {
	ln, err := net.Listen("unix", at)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return at
}
