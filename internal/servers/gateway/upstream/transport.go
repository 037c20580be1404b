package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
)

// Transport is the gateway's http.RoundTripper: it picks a server from the
// pool for each request, counts it in flight until its body is closed, and
// feeds the outcome back to the pool. Short requests go over a pool of
// HTTP/1.1 connections: per request, Go's HTTP/1.1 client and the API
// server's HTTP/1.1 side cost less machine time than HTTP/2's stream
// bookkeeping (BenchmarkProxyOverhead: the gateway's own time per GET fell
// from 40 to 28 µs, and hack/gateway-bench.sh 8 rose from 76% to 83% of
// direct GET throughput). Long-running requests (watches, logs) go over
// HTTP/2, where thousands share a few connections instead of holding one
// each. Upgrade requests (exec, attach, port-forward, WebSockets) need
// HTTP/1.1, which alone has Upgrade.
type Transport struct {
	// Pools are the servers, by pool; the first is the default pool.
	Pools Pools
	// Route is the pool a request goes to, and the pool it may go to
	// when every server of the first is unavailable or fails before an
	// answer (nil: none). Default: the default pool alone.
	Route func(*http.Request) (pool, fallback *Pool)
	// LongRunning says whether a request is balanced by streams rather
	// than short requests in flight.
	LongRunning func(*http.Request) bool
	// Now is the clock; time.Now in production.
	Now func() time.Time
	// OnEject is told when a server is ejected (for logs and metrics).
	OnEject func(*Pool, *Server)

	h2, h1 *http.Transport
}

// NewTransport connects to the pools' servers with tlsConfig (the servers'
// CA and the gateway's client certificate).
func NewTransport(pools Pools, tlsConfig *tls.Config) *Transport {
	base := func(protocols func(*http.Protocols)) *http.Transport {
		var ps http.Protocols
		protocols(&ps)
		return &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     tlsConfig.Clone(),
			TLSHandshakeTimeout: 5 * time.Second,
			// Enough idle HTTP/1.1 connections for the API server's
			// default in-flight limits (400 reads + 200 writes), so a
			// busy gateway does not keep opening new TLS connections.
			MaxIdleConnsPerHost:   600,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
			Protocols:             &ps,
			// Bodies pass through as they are: decompressing and
			// recompressing would only add latency.
			DisableCompression: true,
			HTTP2: &http.HTTP2Config{
				// Let the API server send a LIST in frames of up to 1 MiB
				// instead of 16 KiB: each frame costs the gateway a
				// wake-up, and a large LIST took milliseconds more in
				// small frames than over HTTP/1.1.
				MaxReadFrameSize: 1 << 20,
				// Find a connection to a vanished API server (no RST,
				// e.g. its machine died) within a minute, not at the
				// kernel's TCP timeout.
				SendPingTimeout: 30 * time.Second,
				PingTimeout:     15 * time.Second,
			},
		}
	}
	return &Transport{
		Pools:       pools,
		Route:       func(*http.Request) (*Pool, *Pool) { return pools.Default(), nil },
		LongRunning: func(*http.Request) bool { return false },
		Now:         time.Now,
		h2:          base(func(p *http.Protocols) { p.SetHTTP2(true); p.SetHTTP1(true) }),
		h1:          base(func(p *http.Protocols) { p.SetHTTP1(true) }),
	}
}

// HealthClient is an HTTP client to the servers for active checks.
func (t *Transport) HealthClient() *http.Client {
	return &http.Client{Transport: t.h2, Timeout: 3 * time.Second}
}

// RoundTrip sends req to the least loaded available server of its pool. A
// request with no body that could not reach a server is tried once on
// each other server of the pool, and then, if its route allows, on the
// fallback pool's. A route whose pool has no server available goes to the
// fallback pool at once.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	long := t.LongRunning(req)
	rt := http.RoundTripper(t.h1)
	if long {
		rt = t.h2
	}
	if httpstream.IsUpgradeRequest(req) {
		rt, long = t.h1, true
	}
	pool, fallback := t.Route(req)
	if fallback != nil && !pool.Available(t.Now()) {
		pool, fallback = fallback, nil
	}
	var tried []*Server
	for {
		s := pool.Pick(long, t.Now(), tried...)
		if s == nil {
			return nil, errors.New("no kube-apiserver left to try")
		}
		tried = append(tried, s)
		// A shallow copy with its own URL: the headers are not changed,
		// so they need no copy (http.RoundTripper must not modify req).
		out := new(http.Request)
		*out = *req
		u := *req.URL
		u.Scheme, u.Host = s.URL.Scheme, s.URL.Host
		out.URL, out.Host = &u, s.URL.Host
		counter := &s.InFlight
		if long {
			counter = &s.Streams
		}
		counter.Add(1)
		s.Requests.Add(1)
		resp, err := rt.RoundTrip(out)
		if err != nil {
			counter.Add(-1)
			if req.Context().Err() == nil {
				t.failed(pool, s)
			}
			if !retryable(req, err) {
				return nil, err
			}
			if len(tried) < len(pool.Servers) {
				continue
			}
			if fallback != nil {
				pool, fallback, tried = fallback, nil, nil
				continue
			}
			return nil, err
		}
		// Any answer counts as success: a 503 or 502 from kube-apiserver
		// usually speaks for an aggregated API or a proxied pod behind it,
		// and ejecting a healthy API server for those would move the
		// problem to the others. Its own unreadiness shows in /readyz.
		pool.Succeeded(s)
		resp.Body = &countedBody{body: resp.Body, done: func() { counter.Add(-1) }}
		return resp, nil
	}
}

func (t *Transport) failed(p *Pool, s *Server) {
	if p.Failed(s, t.Now()) && t.OnEject != nil {
		t.OnEject(p, s)
	}
}

// retryable: a request without a body that failed before an answer can go
// to another server; one with a body may have been partly sent, and
// re-sending a write is for the client to decide.
func retryable(req *http.Request, err error) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	return true
}

// countedBody ends a request's in-flight count when the proxy has copied
// and closed its body. An upgraded connection's body is also its
// io.Writer; countedBody keeps that visible to httputil.ReverseProxy.
type countedBody struct {
	body io.ReadCloser
	done func()
	once sync.Once
}

func (b *countedBody) Read(p []byte) (int, error) { return b.body.Read(p) }

func (b *countedBody) Close() error {
	b.once.Do(b.done)
	return b.body.Close()
}

func (b *countedBody) Write(p []byte) (int, error) {
	if w, ok := b.body.(io.Writer); ok {
		return w.Write(p)
	}
	return 0, errors.New("upstream body is not writable: not an upgraded connection")
}
