package nodeguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/tools/events"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options configure a Guard.
type Options struct {
	// Runtime is the runtime's CRI endpoint as gRPC dials it, e.g.
	// unix:///run/containerd/containerd.sock.
	Runtime string
	// Pods is the API's view of this node's pods (NodePods).
	Pods PodSource
	// Recorder gets a KillVetoed Event for every refusal; nil records none.
	Recorder events.EventRecorder
	// Node is this node's name in the API. The refusal of a pod the API
	// no longer has is reported on the Node: an Event about a pod that
	// does not exist shows in no kubectl describe, and its namespace may
	// be gone too (an older copy of etcd restored).
	Node string
	// Metrics; nil makes a registry of the guard's own.
	Metrics *Metrics
	Log     *slog.Logger
	// Settle is how long a stop the guard can only take for a probe
	// restart is held before it is judged again with what happened
	// meanwhile (DefaultSettle).
	Settle time.Duration
	// Memory is how long a kill attempt or a probe restart of a pod is
	// remembered (DefaultMemory).
	Memory time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Vouch keeps the pods' rampart.io/ContainersRunning condition
	// (vouch.go); nil: Pods when it is a Vouching (NodePods), else the
	// guard keeps no condition.
	Vouch Vouching
	// VouchEvery is how often the condition is reconciled with the
	// runtime (DefaultVouchEvery).
	VouchEvery time.Duration
}

// DefaultSettle: when the kubelet kills a pod it stops all its containers
// at once (one goroutine each), and when it rejects or evicts one it
// writes the Failed status before it starts killing. Two seconds lets the
// sibling stops arrive and the status reach the guard's informer on a
// healthy API server (both take milliseconds), and delays a genuine probe
// restart by little next to its grace period (30 s by default).
const DefaultSettle = 2 * time.Second

// DefaultMemory: the kubelet retries a refused kill on its next pod sync,
// seconds later; a minute keeps the evidence of one attempt until the
// next without holding a pod's later, unrelated restarts for long.
const DefaultMemory = time.Minute

// Guard is the CRI proxy: it serves the kubelet, forwards to the runtime,
// and judges the four pod-ending calls.
type Guard struct {
	o      Options
	conn   *grpc.ClientConn
	rt     runtimeapi.RuntimeServiceClient
	index  *index
	memory *memory
	fw     *forwarder
	stats  vouchStats
}

// New connects (lazily) to the runtime and builds the server.
func New(o Options) (*Guard, error) {
	if o.Pods == nil {
		return nil, errors.New("node guard: no PodSource: the guard cannot tell protected pods without the API")
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Memory == 0 {
		o.Memory = DefaultMemory
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if v, ok := o.Pods.(Vouching); ok && o.Vouch == nil {
		o.Vouch = v
	}
	if o.VouchEvery == 0 {
		o.VouchEvery = DefaultVouchEvery
	}
	g := &Guard{o: o, index: newIndex(), memory: newMemory(o.Memory)}
	// One series per registry however many guards share it (tests).
	_ = o.Metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rampart_nodeguard_api_reachable",
		Help: "1 while the node guard's watch of this node's pods is current; 0 while it refuses every kill of a protected pod because the API cannot be reached.",
	}, func() float64 {
		if ok, _ := o.Pods.Reachable(o.Now()); ok {
			return 1
		}
		return 0
	}))
	_ = o.Metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rampart_nodeguard_pods_vouched",
		Help: "Protected pods (restartPolicy Always) whose rampart.io/ContainersRunning condition the node guard holds True: a regular container runs, and the saved-pods.rampart.io policy refuses this node's write turning them Failed.",
	}, func() float64 { return float64(g.stats.vouched.Load()) }))
	_ = o.Metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rampart_nodeguard_pods_saved",
		Help: "Of the vouched pods, those whose kill the node guard refused within its kill memory (--kill-memory): the kubelet is trying to end them, they run on and read Running in the API.",
	}, func() float64 { return float64(g.stats.saved.Load()) }))
	conn, err := grpc.NewClient(o.Runtime,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("node guard: runtime endpoint %q: %w", o.Runtime, err)
	}
	path, err := unixSocket(o.Runtime)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	g.conn, g.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	g.fw = &forwarder{
		dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		judge: g, observe: o.Metrics.observe,
		log: func(msg string, args ...any) { o.Log.Warn(msg, args...) },
		intercepted: map[string]int{
			runtimeapi.RuntimeService_StopPodSandbox_FullMethodName:   guarded,
			runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName: guarded,
			runtimeapi.RuntimeService_StopContainer_FullMethodName:    guarded,
			runtimeapi.RuntimeService_RemoveContainer_FullMethodName:  guarded,
			runtimeapi.RuntimeService_RunPodSandbox_FullMethodName:    observed,
			runtimeapi.RuntimeService_CreateContainer_FullMethodName:  observed,
		},
	}
	return g, nil
}

// unixSocket is the path of a CRI endpoint: unix:///path, unix:/path or
// /path (the forms the kubelet's --container-runtime-endpoint takes on
// Linux).
func unixSocket(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		path = rest
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("node guard: runtime endpoint %q: want a unix socket, unix:///path/to/runtime.sock", endpoint)
	}
	return path, nil
}

// Serve serves the kubelet on ln until ctx ends, then stops: calls in
// flight are cut, as they would be if the runtime restarted.
func (g *Guard) Serve(ctx context.Context, ln net.Listener) error {
	go g.rebuildIndex(ctx)
	if g.o.Vouch != nil {
		go g.vouch(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		_ = g.conn.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(ctx, func() { _ = c.Close() })
			defer stop()
			g.fw.serveConn(ctx, c)
		}()
	}
}

// rebuildIndex reads the runtime's sandboxes and containers, retrying
// until the runtime answers: the guard serves meanwhile, and fills the
// index on each miss.
func (g *Guard) rebuildIndex(ctx context.Context) {
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		err := g.index.rebuild(ctx, g.rt)
		if err == nil {
			g.o.Log.Info("node guard: runtime index built", "ids", g.index.len())
			return
		}
		g.o.Log.Warn("node guard: cannot list the runtime's sandboxes and containers yet; retrying", "err", err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
