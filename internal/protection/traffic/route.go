package traffic

import (
	"fmt"
	"slices"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// DefaultPool is the gateway's pool of --upstreams, where every request
// goes unless a Route policy sends it elsewhere.
const DefaultPool = "default"

// ReasonPoolUnavailable labels the refusal of a request whose Route
// policy's pool has no API server available and says onUnavailable:
// Reject.
const ReasonPoolUnavailable = "pool-unavailable"

// PoolRetryAfter is the Retry-After of that refusal: a few of the
// gateway's health checks, after which the pool may be back.
const PoolRetryAfter = 5 * time.Second

// RouteVerdict says where a request goes: to Pool, the policy's own or
// the default pool (Fallback: because the policy's pool was down); or,
// not Allowed, nowhere.
type RouteVerdict struct {
	verdict.Verdict
	Pool     string
	Fallback bool
}

// Routes decides where the requests a Route policy matches go.
type Routes struct {
	// Available says whether any API server of the named pool takes
	// requests now (ready and not ejected).
	Available func(pool string) bool
}

// Decide sends a request to its policy's pool while any of the pool's API
// servers is available. When none is, the policy's onUnavailable decides:
// Default sends it to the default pool, Reject (the default) refuses it,
// so that a storm moved to API servers of its own never comes back onto
// the others. A request of no policy, or of a policy of another action,
// goes to the default pool.
func (r Routes) Decide(p *Policy) RouteVerdict {
	if p == nil || p.Spec.Action != v1alpha1.ActionRoute || p.Spec.Route == nil {
		return RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool}
	}
	rt := p.Spec.Route
	if rt.Pool == DefaultPool || r.Available(rt.Pool) {
		return RouteVerdict{Verdict: verdict.Allow, Pool: rt.Pool}
	}
	if rt.OnUnavailable == v1alpha1.RouteToDefault {
		return RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool, Fallback: true}
	}
	return RouteVerdict{Pool: rt.Pool, Verdict: verdict.Verdict{
		Refusal:    verdict.Unavailable,
		Reason:     ReasonPoolUnavailable,
		RetryAfter: PoolRetryAfter,
		Message: fmt.Sprintf("TrafficPolicy %q routes this request to upstream pool %q, and none of that pool's API servers is available now; "+
			"its onUnavailable is Reject, so the request is not sent to the other API servers. Retry later; an operator brings the pool back "+
			"(the gateway's log and rampart_gateway_upstream_weight{pool=%q} say which API server is down), or lets the other API servers "+
			"take these requests meanwhile: kubectl patch trafficpolicy %s --type merge -p '{\"spec\":{\"route\":{\"onUnavailable\":\"Default\"}}}'",
			p.Name, rt.Pool, rt.Pool, p.Name),
	}}
}

// WithKnownPools keeps the policies a gateway with the named pools can
// apply: a Route policy naming a pool the gateway lacks is left out
// (unknown), and its requests are judged by the next policy that matches
// them, so that a mistyped pool never exempts a storm from its limits.
func WithKnownPools(sorted []Policy, known func(pool string) bool) (kept, unknown []Policy) {
	kept = slices.DeleteFunc(slices.Clone(sorted), func(p Policy) bool {
		if p.Spec.Action != v1alpha1.ActionRoute || p.Spec.Route == nil || p.Spec.Route.Pool == DefaultPool || known(p.Spec.Route.Pool) {
			return false
		}
		unknown = append(unknown, p)
		return true
	})
	return kept, unknown
}
