package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/traffic"
	"github.com/rampart-io/rampart/internal/servers/gateway/identity"
	"github.com/rampart-io/rampart/internal/servers/gateway/upstream"
)

// The gateway is a chain of guards, as kube-apiserver is a chain of filters
// (WithAuthentication, WithImpersonation, WithPriorityAndFairness...): each
// guard decides one thing about a request, in order, and the first refusal
// answers it. A request every guard lets through is forwarded (forward, in
// handler.go). Unlike the API server's filters, a guard is not an
// http.Handler wrapping the next one: it returns a verdict, so that every
// refusal is answered, counted and logged in one place (refuse), and a
// request costs one context and one copy of the request, not one per
// filter.

// guard decides one step of a request's way through the gateway. It may
// record what it learned in the exchange for the guards after it, and
// register, with x.onEnd, what must run when the request ends (to give
// back an in-flight slot).
//
// Its verdict's Reason labels rampart_gateway_rejections_total, empty for
// a refusal that is not the client's doing (a failed review: 503) or not
// counted there (a malformed request: 400); its Message tells the client
// who refused it, why, and how to proceed; its RetryAfter, in whole
// seconds (traffic.Spread), is sent as Retry-After; its Refusal gives the
// status code (status).
type guard func(x *exchange) verdict.Verdict

// chain is the gateway's guards in the order they decide.
func (g *Gateway) chain() []guard {
	return []guard{
		g.authenticate,   // who the client is: 401, or 503 when a TokenReview fails
		g.impersonate,    // whom it acts as, if it may: 400, 403, or 503
		g.refuseMasters,  // members of system:masters use the API server directly: 403
		g.selectPolicy,   // the first matching TrafficPolicy; never refuses
		g.reject,         // a policy with action Reject: 403
		g.brakeSpace,     // etcd nearly full: creates from outside the control plane, 429
		g.route,          // a policy with action Route: its pool, or 503 when the pool is down
		g.breaker,        // the policy's circuit breaker: 429
		g.limit,          // the policy's rate and in-flight limits: 429
		g.guardListWatch, // LIST prices, unpaginated LISTs, watch counts and rates: 429, 403
	}
}

// pass lets a request on to the next guard.
var pass = verdict.Allow

// refusal is a guard's refusal without a Retry-After.
func refusal(kind verdict.Refusal, reason, message string) verdict.Verdict {
	return verdict.Verdict{Refusal: kind, Reason: reason, Message: message}
}

// status is the refusal as the API server would answer it: a metav1.Status
// built by apimachinery's errors package, which kubectl and client-go
// read (client-go retries a 429 after its Retry-After). The kind of
// refusal gives the code: Throttled 429, Unauthorized 401, Invalid 400,
// Unavailable 503, Forbidden 403.
func status(v verdict.Verdict) *apierrors.StatusError {
	retryAfter := int(math.Ceil(v.RetryAfter.Seconds()))
	switch v.Refusal {
	case verdict.Throttled:
		err := apierrors.NewTooManyRequests(v.Message, retryAfter)
		if retryAfter <= 0 {
			err.ErrStatus.Details = nil
		}
		return err
	case verdict.Unauthorized:
		return apierrors.NewUnauthorized(v.Message)
	case verdict.Invalid:
		return apierrors.NewBadRequest(v.Message)
	case verdict.Unavailable:
		err := apierrors.NewServiceUnavailable(v.Message)
		if retryAfter > 0 {
			err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)}
		}
		return err
	}
	// NewForbidden would rewrite the message ("X is forbidden: ..."); the
	// gateway's messages name the policy themselves.
	st := metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: v.Message}
	if retryAfter > 0 {
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)}
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// exchange is one request on its way through the chain: what the guards
// have learned about it so far. The forward step and the proxy's Rewrite
// and Transport read it from the request's context (exchangeKey).
type exchange struct {
	r     *http.Request
	start time.Time
	// info is the request as kube-apiserver reads it, parsed once; req is
	// what policies match on, built from it.
	info *request.RequestInfo
	req  traffic.Request
	// user is the client the gateway authenticated; as is whom it
	// forwards the request as (user, or whom user may impersonate).
	user, as identity.User
	// policy is the TrafficPolicy that matched (nil: none); policyName
	// labels metrics (noPolicy when none), selected tells the guards that
	// ran before the selection from those after it.
	policy     *traffic.Policy
	policyName string
	selected   bool
	// pool is the upstream pool the request goes to (nil: the default
	// pool), fallback the pool it may go to when pool fails it (a route
	// with onUnavailable: Default).
	pool, fallback *upstream.Pool
	// sample is the percentage of requests written to the access log.
	sample int
	// long is set for watches and other long-running requests.
	long bool
	// ends run when the request ends, last registered first; endsBuf
	// holds them without an allocation of their own.
	ends    []func()
	endsBuf [4]func()
	// resp is the answer as it goes to the client: its code, its bytes
	// and, for LISTs and watches, the objects in it (handler.go).
	resp recorder
	// refused is the verdict of the guard that refused the request; nil
	// for a request forwarded.
	refused *verdict.Verdict
}

// exchangeKey carries the exchange in the forwarded request's context.
type exchangeKey struct{}

// onEnd registers f to run when the request ends, admitted or refused.
func (x *exchange) onEnd(f func()) { x.ends = append(x.ends, f) }

func (x *exchange) end() {
	for i := len(x.ends) - 1; i >= 0; i-- {
		x.ends[i]()
	}
}

// ServeHTTP passes the request through the guards, and forwards it as the
// client's identity when none refuses it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	info := traffic.Info(r)
	x := &exchange{r: r, start: time.Now(), info: info, req: traffic.FromInfo(info, r.URL), policyName: noPolicy}
	x.ends = x.endsBuf[:0]
	x.resp = recorder{ResponseWriter: w, code: http.StatusOK}
	// Deferred: the proxy aborts a response that breaks mid-stream by
	// panicking with http.ErrAbortHandler, and a watch the client
	// leaves ends that way too; both still end, and are observed.
	defer g.finish(x)
	for _, decide := range g.guards {
		if v := decide(x); !v.Allowed {
			g.refuse(&x.resp, x, v)
			return
		}
	}
	g.forward(x)
}

// refuse answers a refusal, counts it and logs it. Requests refused before
// a policy was selected (by the identity guards) count only as
// rejections.
func (g *Gateway) refuse(w http.ResponseWriter, x *exchange, v verdict.Verdict) {
	x.refused = &v
	answer := status(v)
	code := int(answer.ErrStatus.Code)
	if v.Reason != "" {
		g.metrics.rejection(x.policyName, v.Reason).Inc()
	}
	if x.selected {
		verb, resource := g.metrics.labels(x.req, code)
		g.metrics.request(x.policyName, verb, resource, code).Inc()
		g.metrics.top.Add(x.req.User)
	}
	// Refusals are the interesting lines of the access log, but a storm of
	// them must not turn into a storm of log lines.
	if g.refusalLog.Allow() {
		g.accessLog(x, code, true)
	}
	writeStatus(w, answer)
}

// writeStatus answers with the metav1.Status of err, as the API server
// would, with its Retry-After as a header too.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	h := w.Header()
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		h.Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

// forwardContext is the forwarded request's context: the RequestInfo, as
// the API server's own filters carry it, and the exchange.
func forwardContext(ctx context.Context, x *exchange) context.Context {
	return context.WithValue(request.WithRequestInfo(ctx, x.info), exchangeKey{}, x)
}

// exchangeOf is the exchange of a request ServeHTTP forwards; nil for the
// gateway's own requests.
func exchangeOf(r *http.Request) *exchange {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return x
}
