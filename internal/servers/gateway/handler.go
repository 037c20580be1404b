package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
)

// noPolicy labels requests no TrafficPolicy matches.
const noPolicy = "none"

// forward proxies a request the guards let through as the identity they
// settled on, and counts it.
func (g *Gateway) forward(x *exchange) {
	ctx := x.r.Context()
	kind := "short"
	if x.req.LongRunning() {
		kind, x.long = "long", true
		s, done := g.streams.add(x.start)
		x.onEnd(done)
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithValue(ctx, streamKey{}, s))
		stop := context.AfterFunc(g.stopLong, cancel)
		x.onEnd(func() { stop(); cancel() })
	}
	// The identity is set on the proxy's own copy of the request (in
	// Rewrite), sparing a second copy of the headers here.
	out := x.r.WithContext(forwardContext(ctx, x))
	inFlight := g.metrics.inFlightOf(x.policyName, kind)
	inFlight.Inc()
	// Deferred: the proxy aborts a response that breaks mid-stream by
	// panicking with http.ErrAbortHandler.
	defer inFlight.Dec()
	rec := &x.resp
	switch x.req.Verb {
	case "list":
		rec.count = countList
	case "watch":
		rec.count = countWatch
	}
	sent := time.Now()
	g.proxy.ServeHTTP(rec, out)
	end := time.Now()
	// The breakers judge the default pool, the API servers of the
	// requests they guard: a storm routed to a pool of its own, slow or
	// refused there, must not open them for everyone else.
	if x.pool == nil || x.pool == g.pools.Default() {
		g.breakers.record(end, rec.code, end.Sub(sent), x.long)
	}

	verb, resource := g.metrics.labels(x.req, rec.code)
	g.metrics.request(x.policyName, verb, resource, rec.code).Inc()
	if !x.long {
		g.metrics.latencyOf(x.policyName, verb).Observe(end.Sub(x.start).Seconds())
	}
	g.metrics.top.Add(x.user.Name)
	if x.sample > 0 && (x.sample >= 100 || jitter()*100 < float64(x.sample)) {
		g.accessLog(x, rec.code, false)
	}
}

func (g *Gateway) accessLog(x *exchange, code int, refused bool) {
	g.log.Info("request",
		"policy", x.policyName, "user", x.req.User, "userAgent", x.req.UserAgent, "verb", x.req.Verb,
		"path", x.r.URL.Path, "code", code, "refused", refused,
		"ms", float64(time.Since(x.start).Microseconds())/1000)
}

// upstreamError answers when no API server could be reached.
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	g.log.Warn("upstream request failed", "path", r.URL.Path, "err", err.Error())
	writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonInternalError,
		Message: fmt.Sprintf("the gateway could not reach a kube-apiserver (%v); check the API servers' /readyz and the gateway's log", err)}})
}

// recorder notes the status code of the answer, its bytes and, for a LIST
// or a watch, the objects it holds, counted as they pass (never
// buffered). Unwrap lets http.ResponseController, which
// httputil.ReverseProxy uses to flush watch events and to hijack upgraded
// connections, reach the real writer; what an upgraded connection sends
// is not counted.
type recorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
	bytes       int64
	// count says which objects to count: a LIST's items or a watch's
	// events; objects counts them.
	count   countKind
	objects trafficlog.Counter
}

type countKind uint8

const (
	countNothing countKind = iota
	countList
	countWatch
)

func (r *recorder) WriteHeader(code int) {
	// 1xx answers (103 Early Hints) precede the real one.
	if !r.wroteHeader && code >= 200 {
		r.code, r.wroteHeader = code, true
		if r.count != countNothing {
			h := r.Header()
			r.objects.Start(r.count == countWatch, h.Get("Content-Type"), h.Get("Content-Encoding"))
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	if r.count != countNothing {
		r.objects.Write(p[:n])
	}
	return n, err
}

// objectsSent is what the answer held: a LIST's items or a watch's
// events; -1 when not counted.
func (r *recorder) objectsSent() int64 {
	if r.count == countNothing || !r.wroteHeader {
		return -1
	}
	return r.objects.Objects()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush is here as well because some callers test for http.Flusher
// directly rather than through a ResponseController.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
