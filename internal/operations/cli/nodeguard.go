package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

func newNodeGuardCommand() *cobra.Command {
	var kubeconfig, listen, runtimeEndpoint, node, metricsAddr string
	o := nodeguard.Options{}
	staleAfter := nodeguard.DefaultStaleAfter
	cmd := &cobra.Command{
		Use:   "node-guard",
		Short: "Run the CRI proxy between the kubelet and the container runtime that refuses to end protected pods nobody deleted",
		Long: `node-guard serves the CRI (RuntimeService and ImageService) on --listen and
forwards every call to --runtime-endpoint untouched, except StopPodSandbox,
RemovePodSandbox, StopContainer and RemoveContainer of a running pod
labelled rampart.io/explicit-deletion=true: those reach the runtime only
if the API asked for the pod to end (a deletionTimestamp, also in the last
state of a pod gone from the API: one the API's store lost is kept), its
spec ended it
(activeDeadlineSeconds), its containers finished, or the pod's spec asks
for a restart of that one container (image change, resize needing a
restart, liveness or startup probe). Otherwise the kubelet gets a
retryable error naming the way out, the pod a KillVetoed Warning Event
(the Node, for a pod the API no longer has: kubectl describe node), and
the containers keep running.

Point the kubelet's --container-runtime-endpoint at unix://<--listen>.
The guard also keeps the condition rampart.io/ContainersRunning on each
protected pod (restartPolicy Always) of its node: True while a regular
container of it runs in the runtime, False once none does. While it reads
True, the compiled policy saved-pods.rampart.io refuses the node's status
write turning the pod Failed (kubelet rejection at re-admission, eviction):
a pod the guard saved keeps reading Running and stays in its Service.

Its identity (--kubeconfig) needs get, list and watch on pods, patch on
pods/status, and create and patch on events.k8s.io events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return errors.New("--node-name is required (or $NODE_NAME): the guard watches the pods bound to this node")
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "rampart-node-guard/" + Version
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			o.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
			o.Runtime = runtimeEndpoint
			o.Node = node
			pods := nodeguard.NewNodePods(client, node, staleAfter)
			o.Pods = pods
			go pods.Run(ctx)
			// Events get a client of their own, with the kubelet's event
			// rate (eventRecordQPS 50, eventBurst 100): a kubelet killing
			// a node's pods retries every one each sync, and at the
			// default 5 per second the refusals' Events lagged 10 s
			// behind them in the orphaned-pods drill (24 pods).
			eventCfg := rest.CopyConfig(cfg)
			eventCfg.QPS, eventCfg.Burst = 50, 100
			eventClient, err := kubernetes.NewForConfig(eventCfg)
			if err != nil {
				return err
			}
			broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: eventClient.EventsV1()})
			broadcaster.StartRecordingToSink(ctx.Done())
			defer broadcaster.Shutdown()
			o.Recorder = broadcaster.NewRecorder(scheme.Scheme, "rampart-node-guard")
			o.Metrics = nodeguard.NewMetrics()
			g, err := nodeguard.New(o)
			if err != nil {
				return err
			}
			if metricsAddr != "0" {
				stop, err := serveNodeGuardMetrics(metricsAddr, o.Metrics, pods)
				if err != nil {
					return err
				}
				defer stop()
			}
			ln, err := listenUnix(listen)
			if err != nil {
				return err
			}
			defer func() { _ = os.Remove(listen) }()
			o.Log.Info("node guard serving", "listen", listen, "runtime", runtimeEndpoint, "node", node)
			return g.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "/run/rampart/node-guard.sock", "unix socket the kubelet connects to (its --container-runtime-endpoint is unix://THIS); a stale socket file is removed at start")
	f.StringVar(&runtimeEndpoint, "runtime-endpoint", "unix:///run/containerd/containerd.sock", "the container runtime's CRI endpoint")
	f.StringVar(&node, "node-name", os.Getenv("NODE_NAME"), "this node's name in the API, as the kubelet registers it (--hostname-override)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the guard's own identity; empty means $KUBECONFIG or in-cluster")
	f.StringVar(&metricsAddr, "metrics-bind-address", ":9809", "Prometheus metrics, /healthz and /readyz ('0' disables)")
	f.DurationVar(&o.Settle, "settle", nodeguard.DefaultSettle, "how long a container stop that only a failed probe could explain is held before it is judged again")
	f.DurationVar(&o.Memory, "kill-memory", nodeguard.DefaultMemory, "how long a refused kill of a pod, or a probe restart let through, is remembered")
	f.DurationVar(&o.VouchEvery, "vouch-every", nodeguard.DefaultVouchEvery, "how often the pods' rampart.io/ContainersRunning condition is reconciled with the runtime (True while a regular container of a protected pod runs: the saved-pods.rampart.io policy then refuses the node's write turning it Failed)")
	f.DurationVar(&staleAfter, "api-stale-after", staleAfter, "how long the watch of this node's pods may fail before the API counts as unreachable and every kill of a protected pod is refused")
	return cmd
}

// listenUnix listens on a unix socket at path, removing a socket file left
// by a guard that did not stop cleanly. A socket that still answers is
// another guard's: that is an error, not something to take over.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	switch fi, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("--listen: %w", err)
	case fi.Mode()&fs.ModeSocket == 0:
		return nil, fmt.Errorf("--listen %s exists and is not a socket: remove it or choose another path", path)
	default:
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("--listen %s: another process serves this socket (a node guard already running?)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--listen: removing the stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	// Like the runtime's own socket: whoever may use it may start and
	// stop containers, so root (and its group) only.
	if err := os.Chmod(path, 0o660); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("--listen: %w", err)
	}
	return ln, nil
}

func serveNodeGuardMetrics(addr string, m *nodeguard.Metrics, pods *nodeguard.NodePods) (stop func(), err error) {
	ml, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	// Ready: the guard can judge, which needs the API. Not ready still
	// serves the kubelet (refusing protected kills): this is for humans
	// and alerts, not for taking the guard away.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := pods.Reachable(time.Now()); !ok {
			http.Error(w, strings.TrimSpace(why), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ml) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
