package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// noPolicy labels requests no TrafficPolicy matches.
const noPolicy = "none"

// forward proxies a request the guards let through as the identity they
// settled on, and counts it.
func (g *Gateway) forward(w http.ResponseWriter, x *exchange) {
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
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	sent := time.Now()
	g.proxy.ServeHTTP(rec, out)
	end := time.Now()
	g.breakers.record(end, rec.code, end.Sub(sent), x.long)

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
	writeStatus(w, refusal(http.StatusBadGateway, "", fmt.Sprintf("the gateway could not reach a kube-apiserver (%v); check the API servers' /readyz and the gateway's log", err), 0).status())
}

// recorder notes the status code the proxy answered. Unwrap lets
// http.ResponseController, which httputil.ReverseProxy uses to flush
// watch events and to hijack upgraded connections, reach the real writer.
type recorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush is here as well because some callers test for http.Flusher
// directly rather than through a ResponseController.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
