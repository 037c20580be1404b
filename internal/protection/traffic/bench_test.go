package traffic

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkSelectAmong50Policies is the per-request cost of finding the
// policy: the request matches the last of 50.
func BenchmarkSelectAmong50Policies(b *testing.B) {
	var ps []Policy
	for i := range 49 {
		ps = append(ps, policy(b, fmt.Sprintf("p%02d", i), fmt.Sprintf(`{precedence: %d, action: Exempt, match: [{users: [u%d], verbs: [list], resources: [{apiGroups: [""], resources: [pods]}]}, {userAgents: ["agent-%d/*"]}]}`, i+1, i, i)))
	}
	ps = append(ps, policy(b, "catch-all", `{precedence: 9999, action: Limit, limit: {qps: 100}, match: [{}]}`))
	Sort(ps)
	r := Request{User: "alice", Groups: []string{"dev", "system:authenticated"}, UserAgent: "kubectl/v1.36.3", IsResource: true, Verb: "get", Resource: "pods", Namespace: "shop"}
	for b.Loop() {
		if Select(ps, r) == nil {
			b.Fatal("no policy")
		}
	}
}

// BenchmarkDecideFairShare is the per-request cost of a Limit policy shared
// fairly by 100 active users.
func BenchmarkDecideFairShare(b *testing.B) {
	p := policy(b, "shared", `{precedence: 1, action: Limit, limit: {qps: 1000000, burst: 1000000, maxInFlight: 100000}, match: [{}]}`)
	l := NewLimiter()
	now := time.Unix(1_800_000_000, 0)
	var reqs []Request
	for i := range 100 {
		reqs = append(reqs, Request{User: fmt.Sprintf("user-%d", i)})
	}
	i := 0
	for b.Loop() {
		i++
		now = now.Add(time.Microsecond)
		v := l.Decide(&p, reqs[i%len(reqs)], now)
		if !v.Allowed {
			b.Fatal(v.Message)
		}
		v.Done()
	}
}

// BenchmarkDescribe is the per-request cost of classifying a request as
// kube-apiserver does: a named GET, and a paginated LIST whose
// parameters the API server's codec decodes.
func BenchmarkDescribe(b *testing.B) {
	for name, target := range map[string]string{
		"get":  "/api/v1/namespaces/shop/configmaps/web",
		"list": "/api/v1/namespaces/shop/configmaps?limit=500&resourceVersion=0&labelSelector=app%3Dweb",
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if Describe(r).Resource != "configmaps" {
					b.Fatal("not configmaps")
				}
			}
		})
	}
}
