package gateway

import (
	"errors"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/traffic"
	"github.com/rampart-io/rampart/internal/servers/gateway/identity"
)

// The guards of the chain (chain.go), in their order.

// authenticate finds who the client is: its verified client certificate,
// its bearer token (by TokenReview), or anonymous.
func (g *Gateway) authenticate(x *exchange) verdict.Verdict {
	user, err := g.auth.Authenticate(x.r.Context(), x.r)
	if err != nil {
		kind := verdict.Unauthorized
		if !errors.Is(err, identity.ErrUnauthorized) && !errors.Is(err, identity.ErrUnsupportedAuthorization) && !errors.Is(err, identity.ErrNoCredentials) {
			kind = verdict.Unavailable // the TokenReview failed, not the token
		}
		return refusal(kind, "unauthenticated", err.Error())
	}
	x.user, x.as = user, user
	x.req.User, x.req.Groups, x.req.UserAgent = user.Name, user.Groups, x.r.UserAgent()
	return pass
}

// impersonate lets a client act as whom it asks to (Impersonate-* and
// X-Remote-* headers) only if a SubjectAccessReview says it may.
func (g *Gateway) impersonate(x *exchange) verdict.Verdict {
	imp, err := identity.Requested(x.r.Header)
	if err != nil {
		return refusal(verdict.Invalid, "", err.Error())
	}
	if imp == nil {
		return pass
	}
	if err := g.auth.MayImpersonate(x.r.Context(), x.user, imp); err != nil {
		if forbidden := (*identity.Forbidden)(nil); errors.As(err, &forbidden) {
			return refusal(verdict.Forbidden, "impersonation", err.Error())
		}
		return refusal(verdict.Unavailable, "", err.Error())
	}
	x.as = imp.AsUser()
	x.req.Impersonated = &authenticationv1.UserInfo{Username: imp.User, Groups: imp.Groups}
	return pass
}

// refuseMasters never forwards a member of system:masters: the API
// server would refuse to impersonate one, and such clients use the API
// server directly.
func (g *Gateway) refuseMasters(x *exchange) verdict.Verdict {
	if err := identity.Forwardable(x.as); err != nil {
		return refusal(verdict.Forbidden, "masters", err.Error())
	}
	return pass
}

// selectPolicy finds the first TrafficPolicy matching the request. Policies
// match the client the gateway authenticated, not whom it impersonates: a
// client cannot leave its limits by impersonating. A clause may narrow a
// policy for a client by whom it impersonates (match[].impersonated),
// never widen it.
func (g *Gateway) selectPolicy(x *exchange) verdict.Verdict {
	x.selected, x.sample = true, g.opts.AccessLogPercent
	if p := traffic.Select(*g.policies.Load(), x.req); p != nil {
		x.policy, x.policyName, x.sample = p, p.Name, int(p.Spec.AccessLogPercent)
	}
	return pass
}

// limited is the policy of a request that a Limit policy matched, or nil.
func (x *exchange) limited() *traffic.Policy {
	if x.policy == nil || x.policy.Spec.Action != v1alpha1.ActionLimit {
		return nil
	}
	return x.policy
}

// reject refuses what a policy with action Reject matches.
func (g *Gateway) reject(x *exchange) verdict.Verdict {
	p := x.policy
	if p == nil || p.Spec.Action != v1alpha1.ActionReject {
		return pass
	}
	msg := fmt.Sprintf("TrafficPolicy %q refuses this request (%s %s by %s).", p.Name, x.req.Verb, x.r.URL.Path, x.user.Name)
	if p.Spec.RejectMessage != "" {
		msg += " " + p.Spec.RejectMessage
	}
	return refusal(verdict.Forbidden, "rejected", msg)
}

// route sends what a Route policy matches to the policy's pool, or, when
// none of the pool's API servers is available, to the default pool
// (onUnavailable: Default) or nowhere (Reject: 503). Requests of other
// policies go to the default pool.
func (g *Gateway) route(x *exchange) verdict.Verdict {
	p := x.policy
	if p == nil || p.Spec.Action != v1alpha1.ActionRoute {
		return pass
	}
	v := g.routes.Decide(p)
	outcome := "routed"
	switch {
	case !v.Allowed:
		outcome = "refused"
	case v.Fallback:
		outcome = "fallback"
	}
	g.metrics.routedOf.get([3]string{p.Name, v.Pool, outcome}).Inc()
	if !v.Allowed {
		return traffic.Spread(v.Verdict, jitter())
	}
	x.pool = g.pools.Named(v.Pool)
	if p.Spec.Route != nil && p.Spec.Route.OnUnavailable == v1alpha1.RouteToDefault && x.pool != g.pools.Default() {
		x.fallback = g.pools.Default()
	}
	return pass
}

// breaker asks the policy's circuit breaker, if it has one.
func (g *Gateway) breaker(x *exchange) verdict.Verdict {
	p := x.limited()
	if p == nil || p.Spec.Breaker == nil {
		return pass
	}
	if v := g.breakers.decide(p, x.start); !v.Allowed {
		return traffic.Spread(v, jitter())
	}
	return pass
}

// limit applies the policy's rate and in-flight limits, with a fair share
// per client.
func (g *Gateway) limit(x *exchange) verdict.Verdict {
	p := x.limited()
	if p == nil {
		return pass
	}
	v := g.limiter.Decide(p, x.req, x.start)
	if !v.Allowed {
		return traffic.Spread(v.Verdict, jitter())
	}
	x.onEnd(v.Done)
	return pass
}

// guardListWatch applies the policy's list and watch guards: a LIST, or a
// watch that starts by streaming every object (an informer's watch-list),
// is priced by the objects it will return; a watch is counted against its
// client's open watches and the rates of new ones.
func (g *Gateway) guardListWatch(x *exchange) verdict.Verdict {
	p := x.limited()
	if p == nil || p.Spec.List == nil && p.Spec.Watch == nil {
		return pass
	}
	var counts traffic.ObjectCounts
	// Only a priced request consults (and so starts or keeps alive) the
	// per-namespace count of its resource.
	if p.Spec.List != nil && (x.req.Verb == "list" || x.req.InitialEvents()) {
		counts = g.counts.For(x.req, x.start)
	}
	v := g.listWatch.Decide(p, x.req, counts, x.start)
	if !v.Allowed {
		return traffic.Spread(v.Verdict, jitter())
	}
	x.onEnd(v.Done)
	return pass
}
