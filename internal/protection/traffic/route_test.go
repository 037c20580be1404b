package traffic

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

func routePolicy(t *testing.T, name, spec string) Policy {
	t.Helper()
	p := Policy{Name: name}
	if err := yaml.UnmarshalStrict([]byte(spec), &p.Spec); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRoutesDecide: a Route policy's requests go to its pool while any of
// the pool's API servers is up; when none is, Default sends them to the
// default pool and Reject refuses them with 503, a Retry-After and a
// message naming the policy, the pool and the way out. Other requests go
// to the default pool.
func TestRoutesDecide(t *testing.T) {
	up := map[string]bool{"heavy": true, "batch": false}
	routes := Routes{Available: func(pool string) bool { return up[pool] }}
	for _, tc := range []struct {
		name, spec string
		none       bool // no policy matched
		want       RouteVerdict
		message    []string
	}{
		{name: "no policy", none: true, want: RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool}},
		{name: "exempt", spec: `{precedence: 1, action: Exempt, match: [{}]}`, want: RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool}},
		{name: "limit", spec: `{precedence: 1, action: Limit, limit: {qps: 1}, match: [{}]}`, want: RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool}},
		{name: "pool up", spec: `{precedence: 1, action: Route, route: {pool: heavy}, match: [{}]}`, want: RouteVerdict{Verdict: verdict.Allow, Pool: "heavy"}},
		{name: "pool up, default on unavailable", spec: `{precedence: 1, action: Route, route: {pool: heavy, onUnavailable: Default}, match: [{}]}`,
			want: RouteVerdict{Verdict: verdict.Allow, Pool: "heavy"}},
		{name: "to the default pool by name", spec: `{precedence: 1, action: Route, route: {pool: default}, match: [{}]}`,
			want: RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool}},
		{name: "pool down, falls back", spec: `{precedence: 1, action: Route, route: {pool: batch, onUnavailable: Default}, match: [{}]}`,
			want: RouteVerdict{Verdict: verdict.Allow, Pool: DefaultPool, Fallback: true}},
		{name: "pool down, refused", spec: `{precedence: 1, action: Route, route: {pool: batch, onUnavailable: Reject}, match: [{}]}`,
			want:    RouteVerdict{Pool: "batch", Verdict: verdict.Verdict{Refusal: verdict.Unavailable, Reason: ReasonPoolUnavailable, RetryAfter: PoolRetryAfter}},
			message: []string{`TrafficPolicy "pool down, refused"`, `upstream pool "batch"`, "none of that pool's API servers is available", `kubectl patch trafficpolicy pool down, refused`, `"onUnavailable":"Default"`}},
		// The API server fills in Reject; a policy read before that
		// default existed refuses too.
		{name: "pool down, no onUnavailable", spec: `{precedence: 1, action: Route, route: {pool: batch}, match: [{}]}`,
			want: RouteVerdict{Pool: "batch", Verdict: verdict.Verdict{Refusal: verdict.Unavailable, Reason: ReasonPoolUnavailable, RetryAfter: PoolRetryAfter}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *Policy
			if !tc.none {
				pol := routePolicy(t, tc.name, tc.spec)
				p = &pol
			}
			got := routes.Decide(p)
			msg := got.Message
			got.Message = ""
			if got != tc.want {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
			for _, m := range tc.message {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q does not say %q", msg, m)
				}
			}
			if !got.Allowed && msg == "" {
				t.Error("a refusal without a message")
			}
		})
	}
}

// TestWithKnownPools: a Route policy naming a pool the gateway lacks is
// left out, in order, and reported; the rest are kept in order.
func TestWithKnownPools(t *testing.T) {
	ps := []Policy{
		routePolicy(t, "a-heavy", `{precedence: 1, action: Route, route: {pool: heavy}, match: [{}]}`),
		routePolicy(t, "b-typo", `{precedence: 2, action: Route, route: {pool: haevy}, match: [{}]}`),
		routePolicy(t, "c-default", `{precedence: 3, action: Route, route: {pool: default}, match: [{}]}`),
		routePolicy(t, "d-limit", `{precedence: 4, action: Limit, limit: {qps: 1}, match: [{}]}`),
	}
	kept, unknown := WithKnownPools(ps, func(pool string) bool { return pool == "heavy" })
	var names []string
	for _, p := range kept {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a-heavy,c-default,d-limit" || len(unknown) != 1 || unknown[0].Name != "b-typo" {
		t.Errorf("kept %v, unknown %v", names, unknown)
	}
	if len(ps) != 4 || ps[1].Name != "b-typo" {
		t.Error("WithKnownPools changed its input")
	}
	// The request the typo'd policy matched falls to the next one.
	if p := Select(kept, Request{User: "x"}); p == nil || p.Name != "a-heavy" {
		t.Errorf("Select = %v", p)
	}
	if p := Select(kept[1:], Request{User: "x"}); p == nil || p.Spec.Action != v1alpha1.ActionRoute || p.Name != "c-default" {
		t.Errorf("Select = %v", p)
	}
}
