package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
	"github.com/rampart-io/rampart/internal/protection/spacebrake"
	"github.com/rampart-io/rampart/internal/servers/gateway"
	"github.com/rampart-io/rampart/internal/servers/gateway/identity"
	"github.com/rampart-io/rampart/internal/servers/gateway/upstream"
)

func newGatewayCommand() *cobra.Command {
	o := gateway.Options{Upstream: upstream.Defaults, Identity: identity.Defaults}
	var kubeconfig, listen, metricsAddr, trafficLog string
	var trafficLogMaxSize, trafficLogMaxBackups int
	var profiling bool
	var pools []string
	anonymous := true
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the L7 gateway in front of kube-apiserver: authentication, TrafficPolicies, balancing",
		Long: `gateway is a reverse proxy for kube-apiserver. Clients use it as they would
the API server (same CA, client certificates or bearer tokens); it
authenticates them, applies TrafficPolicies (Exempt, Limit, Reject, Route),
and forwards each request to the least loaded ready API server of its pool
(--upstreams, or the --upstream-pool a Route policy names), impersonating
the client. Its own identity comes from --kubeconfig and needs the
ClusterRole rampart-gateway.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every problem with the flags at once, before the kubeconfig
			// is read.
			var problems []error
			if o.CertFile == "" || o.KeyFile == "" {
				problems = append(problems, errors.New("--tls-cert-file and --tls-private-key-file are required: clients send credentials to the gateway"))
			}
			if trafficLog != "" && trafficLog != "-" && (trafficLogMaxSize <= 0 || trafficLogMaxBackups < 0) {
				problems = append(problems, errors.New("--traffic-log-max-size must be 1 or more (megabytes) and --traffic-log-max-backups 0 or more"))
			}
			for _, p := range pools {
				pool, err := gateway.ParseUpstreamPool(p)
				if err != nil {
					problems = append(problems, err)
					continue
				}
				o.UpstreamPools = append(o.UpstreamPools, pool)
			}
			if err := errors.Join(append(problems, o.Validate())...); err != nil {
				return err
			}
			o.Log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
			o.Identity.NoAnonymous = !anonymous
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			switch trafficLog {
			case "":
			case "-":
				o.TrafficLog = os.Stderr
			default:
				o.TrafficLog = trafficlog.File(trafficLog, trafficLogMaxSize, trafficLogMaxBackups)
			}
			g, err := gateway.New(cfg, o)
			if err != nil {
				return err
			}
			if metricsAddr != "0" {
				ml, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-bind-address: %w", err)
				}
				handler := g.MetricsHandler()
				if profiling {
					mux := http.NewServeMux()
					mux.Handle("/", handler)
					mux.HandleFunc("/debug/pprof/", pprof.Index)
					mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
					mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
					handler = mux
				}
				srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
				go func() { _ = srv.Serve(ml) }()
				defer srv.Close()
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			return g.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the gateway's own identity (a client certificate); empty means $KUBECONFIG or in-cluster")
	f.StringVar(&listen, "listen", ":6443", "address clients connect to (TLS)")
	f.StringVar(&metricsAddr, "metrics-bind-address", ":8090", "Prometheus metrics, /healthz and /readyz ('0' disables)")
	f.BoolVar(&profiling, "profiling", false, "serve Go profiles at /debug/pprof/ on the metrics address")
	f.StringSliceVar(&o.Upstreams, "upstreams", nil, "kube-apiserver base URLs, e.g. https://10.0.0.1:6443,https://10.0.0.2:6443 (default: the kubeconfig's server)")
	f.StringArrayVar(&pools, "upstream-pool", nil, "a named pool of other kube-apiservers, NAME=URL[,URL...] (repeat for more pools): only requests a TrafficPolicy with action Route sends to NAME reach them, balanced and health-checked as --upstreams (the default pool) are")
	f.StringVar(&o.CertFile, "tls-cert-file", "", "the gateway's serving certificate")
	f.StringVar(&o.KeyFile, "tls-private-key-file", "", "the gateway's serving key")
	f.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA that signs client certificates (the API server's --client-ca-file)")
	f.DurationVar(&o.HealthInterval, "health-interval", 2*time.Second, "how often each API server's /readyz is checked")
	f.IntVar(&o.Upstream.EjectAfter, "eject-after", o.Upstream.EjectAfter, "consecutive failed requests that take an API server out of rotation")
	f.DurationVar(&o.Upstream.EjectFor, "eject-for", o.Upstream.EjectFor, "how long an ejected API server stays out")
	f.DurationVar(&o.Upstream.SlowStart, "slow-start", o.Upstream.SlowStart, "how long an API server back in rotation takes to get its full share")
	f.DurationVar(&o.Identity.TokenTTL, "token-cache-ttl", o.Identity.TokenTTL, "how long a TokenReview's answer is trusted (a revoked token works this long at most)")
	f.DurationVar(&o.Identity.AccessTTL, "impersonation-cache-ttl", o.Identity.AccessTTL, "how long an impersonation SubjectAccessReview's answer is trusted")
	f.IntVar(&o.Identity.CacheSize, "auth-cache-size", o.Identity.CacheSize, "entries in the token and impersonation caches")
	f.BoolVar(&anonymous, "anonymous-auth", true, "forward requests without credentials as system:anonymous; set false when the API servers run with --anonymous-auth=false")
	f.IntVar(&o.AccessLogPercent, "access-log-percent", 0, "percent of requests no TrafficPolicy matches written to the access log")
	f.StringSliceVar(&o.CountResources, "count-resources", []string{"pods"}, "resources the LIST guard counts per namespace from the start, not from their first guarded LIST (kubectl's names: pods,configmaps,deployments.apps; never secrets)")
	f.StringSliceVar(&o.CountCustomResourceGroups, "count-custom-resource-groups", nil, "API groups of custom resources the LIST guard may count per namespace, e.g. cert-manager.io (grant the gateway list and watch on them: the chart's gateway.countCustomResourceGroups); others are priced by their cluster-wide count. Not '*', not the core group")
	f.DurationVar(&o.CountIdleAfter, "count-idle-after", 10*time.Minute, "stop counting a resource per namespace (one watch of its metadata) after no guarded LIST or watch-list of it for this long; --count-resources are counted always")
	f.StringVar(&o.Name, "name", "", "this replica's name in TrafficPolicies' status.breakers (default: the host name; in a Pod, pass its name)")
	f.StringVar(&trafficLog, "traffic-log", "", "write the traffic log, one JSON line per request (user, verb, resource, code, latency, response bytes, LIST objects, watch events, policy, verdict), to this file, rotated; '-' is stderr; empty: none. Read it with 'rampart traffic profile'")
	f.IntVar(&trafficLogMaxSize, "traffic-log-max-size", 100, "megabytes of a traffic log file before it is rotated")
	f.IntVar(&trafficLogMaxBackups, "traffic-log-max-backups", 5, "rotated traffic log files kept (0: all)")
	f.StringVar(&o.TrafficLogSample, "traffic-log-sample", gateway.SampleAll, "which requests the traffic log records: all, or policy (as the access log samples: each TrafficPolicy's accessLogPercent, --access-log-percent for requests no policy matches; each line says how many requests it stands for)")
	f.StringVar(&o.Namespace, "namespace", "rampart-system", "Rampart's namespace, where the manager publishes its look at etcd's space (ConfigMap rampart-etcd-space) for the etcd-space brake")
	f.Float64Var(&o.EtcdSpaceBrakeShare, "etcd-space-brake-share", spacebrake.DefaultShare, "from this share of etcd's quota (the fullest member's, as the manager last reported it), or at NOSPACE, refuse creates from clients outside the control plane (429) so that leases, node status, updates and deletes keep working while space is recovered; 0 turns the brake off")
	f.StringSliceVar(&o.EtcdSpaceBrakeExemptUsers, "etcd-space-brake-exempt-users", nil, "users whose creates pass the etcd-space brake besides the control plane, Rampart's service accounts and leases (Rampart's manager when it is not a service account of --namespace)")
	cmd.AddCommand(newBreakerCommand())
	f.DurationVar(&o.ShutdownWatchSpread, "shutdown-watch-spread", 5*time.Second, "on SIGTERM, end the watches in batches over this time, each so that its client resumes from where it was instead of relisting; set the pod's terminationGracePeriodSeconds above this plus 10s")
	return cmd
}
