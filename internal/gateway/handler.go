package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/gateway/identity"
	"github.com/rampart-io/rampart/internal/gateway/traffic"
)

// forwardKey carries a forwarding from ServeHTTP to the proxy's Rewrite
// and Transport.
type forwardKey struct{}

// forwarding is what ServeHTTP decided about a request that the proxy
// needs: the identity to forward, and whether the request is long-running
// (so that the transport balances it without parsing it again).
type forwarding struct {
	as   identity.User
	long bool
}

// noPolicy labels requests no TrafficPolicy matches.
const noPolicy = "none"

// ServeHTTP authenticates the client, judges the request by the first
// matching TrafficPolicy and proxies it as the client's identity.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx := r.Context()
	user, err := g.auth.Authenticate(ctx, r)
	if err != nil {
		code := http.StatusUnauthorized
		if !errors.Is(err, identity.ErrUnauthorized) && !errors.Is(err, identity.ErrUnsupportedAuthorization) && !errors.Is(err, identity.ErrNoCredentials) {
			code = http.StatusServiceUnavailable // the TokenReview failed, not the token
		}
		g.metrics.rejections.WithLabelValues(noPolicy, "unauthenticated").Inc()
		if g.refusalLog.Allow() {
			g.log.Info("request", "policy", noPolicy, "path", r.URL.Path, "code", code, "refused", true, "err", err.Error())
		}
		writeStatus(w, code, err.Error(), 0)
		return
	}
	req := traffic.Describe(r)
	req.User, req.Groups, req.UserAgent = user.Name, user.Groups, r.UserAgent()

	forwardAs := user
	imp, err := identity.Requested(r.Header)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, err.Error(), 0)
		return
	}
	if imp != nil {
		if err := g.auth.MayImpersonate(ctx, user, imp); err != nil {
			var forbidden *identity.Forbidden
			code := http.StatusServiceUnavailable
			if errors.As(err, &forbidden) {
				code = http.StatusForbidden
				g.metrics.rejections.WithLabelValues(noPolicy, "impersonation").Inc()
			}
			if g.refusalLog.Allow() {
				g.accessLog(r, req, noPolicy, code, start, true)
			}
			writeStatus(w, code, err.Error(), 0)
			return
		}
		forwardAs = imp.AsUser()
		req.Impersonated = &authenticationv1.UserInfo{Username: imp.User, Groups: imp.Groups}
	}
	if err := identity.Forwardable(forwardAs); err != nil {
		g.metrics.rejections.WithLabelValues(noPolicy, "masters").Inc()
		if g.refusalLog.Allow() {
			g.accessLog(r, req, noPolicy, http.StatusForbidden, start, true)
		}
		writeStatus(w, http.StatusForbidden, err.Error(), 0)
		return
	}

	// Policies match the client the gateway authenticated, not whom it
	// impersonates: a client cannot leave its limits by impersonating.
	// A clause may narrow a policy for a client by whom it impersonates
	// (match[].impersonated), never widen it.
	policyName, sample := noPolicy, g.opts.AccessLogPercent
	if p := traffic.Select(*g.policies.Load(), req); p != nil {
		policyName, sample = p.Name, int(p.Spec.AccessLogPercent)
		switch p.Spec.Action {
		case v1alpha1.ActionReject:
			msg := fmt.Sprintf("TrafficPolicy %q refuses this request (%s %s by %s).", p.Name, req.Verb, r.URL.Path, user.Name)
			if p.Spec.RejectMessage != "" {
				msg += " " + p.Spec.RejectMessage
			}
			g.refused(w, r, req, p.Name, "rejected", http.StatusForbidden, msg, 0, start)
			return
		case v1alpha1.ActionLimit:
			if p.Spec.Breaker != nil {
				if d := g.breakers.decide(p, start); !d.Admitted {
					g.refused(w, r, req, p.Name, "breaker", http.StatusTooManyRequests, d.Message, traffic.RetryAfter(d.Wait, jitter()), start)
					return
				}
			}
			v := g.limiter.Decide(p, req, start)
			if !v.Admitted {
				g.refused(w, r, req, p.Name, v.Reason, http.StatusTooManyRequests, v.Message, traffic.RetryAfter(v.Wait, jitter()), start)
				return
			}
			defer v.Done()
			gv := g.guardListWatch(p, req, start)
			if !gv.Admitted {
				g.refused(w, r, req, p.Name, gv.Reason, gv.StatusCode(), gv.Message, gv.RetryAfterSeconds(jitter()), start)
				return
			}
			defer gv.Done()
		}
	}

	// The identity is set on the proxy's own copy of the request (in
	// Rewrite), sparing a second copy of the headers here.
	kind := "short"
	if req.LongRunning() {
		kind = "long"
		s, done := g.streams.add(start)
		defer done()
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithValue(ctx, streamKey{}, s))
		defer cancel()
		defer context.AfterFunc(g.stopLong, cancel)()
	}
	out := r.WithContext(context.WithValue(ctx, forwardKey{}, forwarding{as: forwardAs, long: kind == "long"}))
	inFlight := g.metrics.inFlight.WithLabelValues(policyName, kind)
	inFlight.Inc()
	// Deferred: the proxy aborts a response that breaks mid-stream by
	// panicking with http.ErrAbortHandler.
	defer inFlight.Dec()
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	sent := time.Now()
	g.proxy.ServeHTTP(rec, out)
	end := time.Now()
	g.breakers.record(end, rec.code, end.Sub(sent), kind == "long")

	verb, resource := g.metrics.labels(req, rec.code)
	code := strconv.Itoa(rec.code)
	g.metrics.requests.WithLabelValues(policyName, verb, resource, code).Inc()
	if kind == "short" {
		g.metrics.latency.WithLabelValues(policyName, verb).Observe(time.Since(start).Seconds())
	}
	g.metrics.top.Add(user.Name)
	if sample > 0 && (sample >= 100 || jitter()*100 < float64(sample)) {
		g.accessLog(r, req, policyName, rec.code, start, false)
	}
}

func (g *Gateway) refused(w http.ResponseWriter, r *http.Request, req traffic.Request, policy, reason string, code int, msg string, retryAfter int, start time.Time) {
	verb, resource := g.metrics.labels(req, code)
	g.metrics.rejections.WithLabelValues(policy, reason).Inc()
	g.metrics.requests.WithLabelValues(policy, verb, resource, strconv.Itoa(code)).Inc()
	g.metrics.top.Add(req.User)
	// Refusals are the interesting lines of the access log, but a storm of
	// them must not turn into a storm of log lines.
	if g.refusalLog.Allow() {
		g.accessLog(r, req, policy, code, start, true)
	}
	writeStatus(w, code, msg, retryAfter)
}

func (g *Gateway) accessLog(r *http.Request, req traffic.Request, policy string, code int, start time.Time, refused bool) {
	g.log.Info("request",
		"policy", policy, "user", req.User, "userAgent", req.UserAgent, "verb", req.Verb,
		"path", r.URL.Path, "code", code, "refused", refused,
		"ms", float64(time.Since(start).Microseconds())/1000)
}

// upstreamError answers when no API server could be reached.
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	g.log.Warn("upstream request failed", "path", r.URL.Path, "err", err.Error())
	writeStatus(w, http.StatusBadGateway, fmt.Sprintf("the gateway could not reach a kube-apiserver (%v); check the API servers' /readyz and the gateway's log", err), 0)
}

// writeStatus answers with a metav1.Status, as the API server would, so
// that kubectl and client-go show the message.
func writeStatus(w http.ResponseWriter, code int, msg string, retryAfter int) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Code: int32(code),
		Reason: metav1.StatusReason(reasonFor(code)),
	}
	if retryAfter > 0 {
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)}
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}

func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	}
	return metav1.StatusReasonInternalError
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
