// Package gateway is `rampart gateway`: an L7 reverse proxy in front of one
// or more kube-apiservers that authenticates every client itself, applies
// TrafficPolicies (exempt, limit with a fair share per client, reject,
// route to a pool of API servers of their own) and spreads requests over
// the API servers of their pool.
//
// # How the API server learns who the client is
//
// The gateway terminates TLS, so the API server sees the gateway's
// connection, not the client's. It forwards the identity it authenticated
// by impersonation: it talks to the API server with its own client
// certificate (user rampart-gateway) or token and sets Impersonate-User, -Group,
// -Uid and -Extra-* to the client's identity; the API server then
// authorizes and audits the request as that user ("impersonatedUser" in the
// audit log, the gateway as "user").
//
// We chose impersonation over request-header authentication (X-Remote-User
// from a front proxy) because it needs nothing from the API server's
// configuration: request-header authentication must be switched on with
// --requestheader-client-ca-file and a dedicated front-proxy CA, on every
// API server, which a managed control plane does not let you do, and its
// certificate may then assert any group, system:masters included. With
// impersonation the gateway's power is an ordinary ClusterRole
// (ClusterRole below), visible and revocable with kubectl, and every
// forwarded request is checked twice: by the gateway (policies) and by the
// API server (impersonation rights, then the user's own RBAC). The role
// grants constrained impersonation only (KEP-5284), under which the API
// server refuses to impersonate system:masters: the gateway's credentials
// are not cluster-admin by themselves, and the gateway refuses to forward
// members of system:masters (they use the API server directly). They can
// still act as any other user or group, so keep the gateway's key as you
// would an admin's. The price is a few in-memory RBAC checks per request
// on the API server.
//
// Clients cannot widen their rights through the gateway: their own
// Impersonate-* and X-Remote-* headers are removed and replaced by the
// identity the gateway authenticated, unless a SubjectAccessReview says
// the client itself may impersonate what it asks for (package identity).
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/rampart-io/rampart/internal/plumbing/tlsprofile"
	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
	"github.com/rampart-io/rampart/internal/protection/traffic"
	"github.com/rampart-io/rampart/internal/servers/gateway/identity"
	"github.com/rampart-io/rampart/internal/servers/gateway/upstream"
)

// Gateway is the proxy. It is an http.Handler; Serve runs it on a listener.
type Gateway struct {
	opts      Options
	log       *slog.Logger
	pools     upstream.Pools
	routes    traffic.Routes
	transport *upstream.Transport
	proxy     *httputil.ReverseProxy
	auth      *identity.Authenticator
	// guards decide, in order, whether a request is forwarded (chain.go).
	guards    []guard
	limiter   *traffic.Limiter
	listWatch *traffic.Guards
	counts    *objectCounts
	policies  atomic.Pointer[[]traffic.Policy]
	// policyFence holds the answer to a policy write until it applies.
	policyFence *policyFence
	synced      atomic.Bool
	metrics     *metrics
	breakers    *breakers
	client      kubernetes.Interface
	restCfg     *rest.Config
	tlsConfig   *tls.Config
	// refusalLog bounds the access-log lines of refused requests.
	refusalLog *rate.Limiter
	// streams are the long-running requests in flight, which a stopping
	// gateway ends in batches.
	streams streams
	// draining is set once the gateway stops: /readyz fails, so that a
	// Service sends new connections to the other replicas.
	draining atomic.Bool
	// stopLong ends after the watches are ended: what is still running
	// then (exec, attach, port-forward) is cut.
	stopLong context.Context
	// observe run when a request ends (observe.go); traffic is the
	// traffic log, nil when off.
	observe []observer
	traffic *trafficlog.Log
	// space is the etcd-space brake's reading (spacebrake.go).
	space *spaceBrake
}

// New builds a gateway that reaches the API servers with cfg's
// credentials (the gateway's own identity) and CA.
func New(cfg *rest.Config, opts Options) (*Gateway, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults(cfg)
	// Again with the default pool filled in: the kubeconfig's server may
	// be named in a pool too.
	if errs := opts.validatePools(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	pools, err := opts.pools(time.Now())
	if err != nil {
		return nil, err
	}
	upTLS, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("TLS to the API servers from the kubeconfig: %w", err)
	}
	hasCert := upTLS != nil && (len(upTLS.Certificates) > 0 || upTLS.GetClientCertificate != nil)
	hasToken := cfg.BearerToken != "" || cfg.BearerTokenFile != ""
	if !hasCert && !hasToken {
		return nil, errors.New("the gateway's kubeconfig has neither a client certificate nor a token: the gateway must authenticate as itself (bound to ClusterRole rampart-gateway) to impersonate its clients")
	}
	g := &Gateway{opts: opts, log: opts.Log, limiter: traffic.NewLimiter(), listWatch: traffic.NewGuards(), refusalLog: rate.NewLimiter(20, 20), stopLong: context.Background(), policyFence: newPolicyFence(""), space: newSpaceBrake()}
	g.pools = pools
	g.routes = traffic.Routes{Available: func(name string) bool {
		p := g.pools.Named(name)
		return p != nil && p.Available(time.Now())
	}}
	g.transport = g.upstreamTransport(upTLS)
	if g.proxy, err = g.reverseProxy(cfg, hasToken); err != nil {
		return nil, err
	}
	empty := []traffic.Policy{}
	g.policies.Store(&empty)
	g.metrics = newMetrics(g)
	g.breakers = newBreakers(g)
	g.guards = g.chain()
	if err := g.ownClients(cfg); err != nil {
		return nil, err
	}
	if g.tlsConfig, err = servingTLS(opts); err != nil {
		return nil, err
	}
	if opts.TrafficLog != nil {
		g.logTrafficTo(opts.TrafficLog)
	}
	g.observe = g.observers()
	return g, nil
}

// upstreamTransport spreads requests over the API servers of their pool:
// the one the route guard chose (x.pool), the default pool for the
// gateway's own requests.
func (g *Gateway) upstreamTransport(upTLS *tls.Config) *upstream.Transport {
	t := upstream.NewTransport(g.pools, upTLS)
	t.Route = func(r *http.Request) (*upstream.Pool, *upstream.Pool) {
		if x := exchangeOf(r); x != nil && x.pool != nil {
			return x.pool, x.fallback
		}
		return g.pools.Default(), nil
	}
	t.LongRunning = func(r *http.Request) bool {
		if x := exchangeOf(r); x != nil {
			return x.long
		}
		// The gateway's own requests (its policy and count watches).
		return traffic.Describe(r).LongRunning()
	}
	t.OnEject = func(p *upstream.Pool, s *upstream.Server) {
		g.metrics.ejections.WithLabelValues(p.Name, s.URL.Host).Inc()
		g.log.Warn("upstream ejected after consecutive failures", "pool", p.Name, "upstream", s.URL.Host, "for", g.opts.Upstream.EjectFor.String())
	}
	return t
}

// reverseProxy forwards a request as the client the guards let through.
func (g *Gateway) reverseProxy(cfg *rest.Config, hasToken bool) (*httputil.ReverseProxy, error) {
	// The proxy's requests carry the gateway's own credentials: its
	// certificate (in the transport's TLS) or its token, which in a
	// cluster is a service account's, re-read as it is rotated.
	var proxyTransport http.RoundTripper = g.transport
	if hasToken {
		var err error
		if proxyTransport, err = transport.NewBearerAuthWithRefreshRoundTripper(cfg.BearerToken, cfg.BearerTokenFile, g.transport); err != nil {
			return nil, fmt.Errorf("the gateway's token: %w", err)
		}
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			// The transport picks the server; the path and query go
			// unchanged.
			r.Out.URL.Scheme, r.Out.URL.Host = "https", "kube-apiserver"
			// The API server records X-Forwarded-For as the audit
			// event's source IPs; Rewrite has dropped what the client
			// sent, so this is the client's real address.
			r.SetXForwarded()
			if x := exchangeOf(r.In); x != nil {
				identity.Forward(r.Out.Header, x.as)
			} else {
				// Unreachable: forward always sets it. Forwarding
				// without an identity would act as the gateway itself.
				identity.Forward(r.Out.Header, identity.Anonymous)
			}
		},
		Transport:      endableTransport{next: proxyTransport},
		ModifyResponse: g.fencePolicyWrite,
		BufferPool:     bufferPool{},
		ErrorHandler:   g.upstreamError,
		ErrorLog:       slog.NewLogLogger(g.opts.Log.Handler(), slog.LevelWarn),
	}, nil
}

// ownClients are the gateway's own calls (TokenReview,
// SubjectAccessReview, the policy watch, the object counts): they go
// through the pool too, so they survive an API server going away like any
// client's.
func (g *Gateway) ownClients(cfg *rest.Config) error {
	own := rest.CopyConfig(cfg)
	own.QPS, own.Burst = 200, 400
	own.UserAgent = "rampart-gateway"
	own.WrapTransport = func(http.RoundTripper) http.RoundTripper { return g.transport }
	g.restCfg = own
	var err error
	if g.client, err = kubernetes.NewForConfig(own); err != nil {
		return err
	}
	if g.counts, err = newObjectCounts(own, g.client.CoreV1().RESTClient(), g.log); err != nil {
		return err
	}
	if g.opts.CountIdleAfter > 0 {
		g.counts.idleAfter = g.opts.CountIdleAfter
	}
	g.counts.customGroups = map[string]bool{}
	for _, grp := range g.opts.CountCustomResourceGroups {
		g.counts.customGroups[grp] = true
	}
	g.counts.mayCount = selfAccessReview(g.client.AuthorizationV1().SelfSubjectAccessReviews())
	g.metrics.registry.MustRegister(g.counts)
	g.auth = identity.New(g.client.AuthenticationV1().TokenReviews(), g.client.AuthorizationV1().SubjectAccessReviews(), g.opts.Identity)
	return nil
}

// servingTLS is the gateway's TLS to its clients, nil without a serving
// certificate (plain HTTP, for tests).
func servingTLS(opts Options) (*tls.Config, error) {
	if opts.CertFile == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("the gateway's serving certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}}
	tlsprofile.Apply(c)
	if opts.ClientCAFile == "" {
		return c, nil
	}
	caPEM, err := os.ReadFile(opts.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("client CA %s holds no PEM certificate", opts.ClientCAFile)
	}
	// Certificates are optional: token and anonymous clients have none. A
	// certificate given must verify.
	c.ClientAuth = tls.VerifyClientCertIfGiven
	c.ClientCAs = pool
	return c, nil
}

// logTrafficTo writes the traffic log to w, and counts its lines.
func (g *Gateway) logTrafficTo(w io.Writer) {
	g.traffic = trafficlog.New(w)
	g.metrics.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rampart_gateway_traffic_log_lines_total",
			Help: "Lines written to the traffic log.",
		}, func() float64 { return float64(g.traffic.Written.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rampart_gateway_traffic_log_dropped_total",
			Help: "Traffic log lines dropped because the disk did not keep up (the queue was full); requests are never held for the log.",
		}, func() float64 { return float64(g.traffic.Dropped.Load()) }))
}

// Serve runs the gateway on ln (TLS when a serving certificate is set)
// until ctx ends: policy watch, upstream health checks and the proxy.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		g.transport.CheckReady(background, g.opts.HealthInterval, func(p *upstream.Pool, s *upstream.Server, ready bool) {
			g.log.Info("upstream availability changed", "pool", p.Name, "upstream", s.URL.Host, "ready", ready)
		})
	})
	wg.Go(func() { g.counts.run(background, g.opts.CountResources) })
	if err := g.watchPolicies(background, &wg); err != nil {
		stopBackground()
		return err
	}
	if err := g.watchSpace(background, &wg); err != nil {
		stopBackground()
		return err
	}
	wg.Go(func() { g.breakers.run(background, &wg) })
	// Requests do not inherit ctx: when it ends, running requests are
	// drained, not cut. Long-running ones would never finish by
	// themselves: they are ended in batches (endStreams), and what is left
	// after that is cancelled.
	var stopLong context.CancelFunc
	g.stopLong, stopLong = context.WithCancel(context.Background())
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	if g.tlsConfig != nil {
		srv.TLSConfig = g.tlsConfig.Clone()
		ln = tls.NewListener(ln, withHTTP2(srv.TLSConfig))
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	g.log.Info("gateway serving", "address", ln.Addr().String(), "upstreams", g.opts.Upstreams, "pools", g.opts.UpstreamPools)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	g.draining.Store(true)
	spread := max(g.opts.ShutdownWatchSpread, 0)
	g.log.Info("gateway stopping: draining", "watchSpread", spread.String(), "drainTimeout", drainTimeout.String())
	// Shutdown closes the listener (new connections are refused, and
	// client-go backs off on a refused connection rather than relisting),
	// sends HTTP/2 clients a GOAWAY so that their next requests open a
	// new connection, and waits for the requests in flight.
	drain, cancel := context.WithTimeout(context.Background(), spread+drainTimeout)
	defer cancel()
	shutdown := make(chan error, 1)
	go func() { shutdown <- srv.Shutdown(drain) }()
	g.endStreams(spread)
	stopLong()
	if <-shutdown != nil {
		_ = srv.Close()
	}
	stopBackground()
	if g.traffic != nil {
		if cerr := g.traffic.Close(); cerr != nil {
			g.log.Warn("closing the traffic log", "err", cerr.Error())
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// drainTimeout bounds how long a stopping gateway waits, after its
// watches are ended, for short requests (a large LIST included) to finish.
const drainTimeout = 10 * time.Second

// withHTTP2 offers HTTP/2 to clients, as kube-apiserver does.
func withHTTP2(c *tls.Config) *tls.Config {
	c.NextProtos = []string{"h2", "http/1.1"}
	return c
}

// MetricsHandler serves Prometheus metrics, /healthz and /readyz (ready
// once the TrafficPolicies are loaded).
func (g *Gateway) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if g.draining.Load() {
			http.Error(w, "the gateway is stopping", http.StatusServiceUnavailable)
			return
		}
		if !g.synced.Load() {
			http.Error(w, "TrafficPolicies not loaded yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Registry is the gateway's Prometheus registry (for tests and embedding).
func (g *Gateway) Registry() *prometheus.Registry { return g.metrics.registry }

// bufferPool reuses the proxy's copy buffers: a LIST of thousands of
// objects would otherwise allocate one per request.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// jitter is the randomness of Retry-After.
func jitter() float64 { return rand.Float64() }
