package traffic

import (
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        Request
	}{
		{"GET", "/api/v1/namespaces/shop/pods/web-1", Request{Version: "v1", IsResource: true, Verb: "get", Resource: "pods", Namespace: "shop", Name: "web-1"}},
		{"GET", "/api/v1/namespaces/shop/pods", Request{Version: "v1", IsResource: true, Verb: "list", Resource: "pods", Namespace: "shop"}},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "pods", ResourceVersion: "5"}},
		{"GET", "/api/v1/namespaces/shop/configmaps?limit=500&resourceVersion=0", Request{Version: "v1", IsResource: true, Verb: "list", Resource: "configmaps", Namespace: "shop", Limit: 500, ResourceVersion: "0"}},
		{"GET", "/api/v1/namespaces/shop/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "pods", Namespace: "shop", SendInitialEvents: ptrTo(true)}},
		{"GET", "/api/v1/namespaces/shop/pods?fieldSelector=metadata.name%3Dweb-1&limit=500", Request{Version: "v1", IsResource: true, Verb: "list", Resource: "pods", Namespace: "shop", Name: "web-1", Limit: 500, SingleObject: true}},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", Request{Version: "v1", IsResource: true, Verb: "list", Resource: "pods"}},
		{"GET", "/api/v1/watch/namespaces/shop/pods", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "pods", Namespace: "shop"}},
		{"GET", "/api/v1/namespaces/shop/pods/web-1/log", Request{Version: "v1", IsResource: true, Verb: "get", Resource: "pods", Subresource: "log", Namespace: "shop", Name: "web-1"}},
		{"POST", "/api/v1/namespaces/shop/pods/web-1/exec", Request{Version: "v1", IsResource: true, Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "shop", Name: "web-1"}},
		{"DELETE", "/apis/apps/v1/namespaces/shop/deployments", Request{Version: "v1", IsResource: true, Verb: "deletecollection", APIGroup: "apps", Resource: "deployments", Namespace: "shop"}},
		{"PATCH", "/apis/apps/v1/namespaces/shop/deployments/web/scale", Request{Version: "v1", IsResource: true, Verb: "patch", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "shop", Name: "web"}},
		{"GET", "/api/v1/namespaces/shop", Request{Version: "v1", IsResource: true, Verb: "get", Resource: "namespaces", Namespace: "shop", Name: "shop"}},
		{"GET", "/api/v1/namespaces", Request{Version: "v1", IsResource: true, Verb: "list", Resource: "namespaces"}},
		{"PUT", "/api/v1/namespaces/shop/finalize", Request{Version: "v1", IsResource: true, Verb: "update", Resource: "namespaces", Namespace: "shop", Name: "shop", Subresource: "finalize"}},
		{"GET", "/apis/rampart.io/v1alpha1/trafficpolicies", Request{Version: "v1alpha1", IsResource: true, Verb: "list", APIGroup: "rampart.io", Resource: "trafficpolicies"}},
		// Discovery is a non-resource request to the API server: no group
		// or version to authorize.
		{"GET", "/apis/apps/v1", Request{Verb: "get"}},
		{"GET", "/readyz", Request{Verb: "get"}},
		{"GET", "/version", Request{Verb: "get"}},
		// Issue 24: what slipped past policies. The API server reads any
		// watch value but "0" and "false" as true, and a named GET is a
		// get whatever its query says.
		{"GET", "/api/v1/namespaces/shop/secrets/db?watch=1", Request{Version: "v1", IsResource: true, Verb: "get", Resource: "secrets", Namespace: "shop", Name: "db"}},
		{"GET", "/api/v1/namespaces/shop/secrets?watch=t", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "secrets", Namespace: "shop"}},
		{"GET", "/api/v1/namespaces/shop/secrets?watch=TRUE", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "secrets", Namespace: "shop"}},
		{"GET", "/api/v1/namespaces/shop/secrets?watch=", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "secrets", Namespace: "shop"}},
		{"GET", "/api/v1/namespaces/shop/secrets?watch=False", Request{Version: "v1", IsResource: true, Verb: "list", Resource: "secrets", Namespace: "shop"}},
		{"GET", "/api/v1/namespaces/shop/pods?watch=yes&sendInitialEvents=t", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "pods", Namespace: "shop", SendInitialEvents: ptrTo(true)}},
		{"GET", "/api/v1/watch/namespaces/shop/secrets/db", Request{Version: "v1", IsResource: true, Verb: "watch", Resource: "secrets", Namespace: "shop", Name: "db", SingleObject: true}},
		{"GET", "/api/v1/proxy/namespaces/shop/pods/web-1/metrics", Request{Version: "v1", IsResource: true, Verb: "proxy", Resource: "pods", Namespace: "shop", Name: "web-1"}},
	} {
		r := httptest.NewRequest(tc.method, tc.url, nil)
		got := Describe(r)
		tc.want.Path = r.URL.Path
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s:\n got %+v\nwant %+v", tc.method, tc.url, got, tc.want)
		}
	}
}

func policy(t testing.TB, name string, spec string) Policy {
	t.Helper()
	p := Policy{Name: name, Generation: 1}
	if err := yaml.UnmarshalStrict([]byte(spec), &p.Spec); err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
	return p
}

func TestPolicyMatches(t *testing.T) {
	listPods := Request{User: "alice", Groups: []string{"dev"}, UserAgent: "kubectl/v1.36.3 (linux/amd64)", IsResource: true, Verb: "list", Resource: "pods", Namespace: "shop"}
	podLog := Request{User: "alice", UserAgent: "python-requests/2.31", IsResource: true, Verb: "get", Resource: "pods", Subresource: "log", Namespace: "shop", Name: "web"}
	allPods := Request{User: "system:serviceaccount:ci:deployer", UserAgent: "deployer", IsResource: true, Verb: "list", Resource: "pods"}
	healthz := Request{User: "system:anonymous", Verb: "get", Path: "/healthz"}
	scale := Request{User: "bob", IsResource: true, Verb: "patch", APIGroup: "apps", Resource: "deployments", Subresource: "scale", Namespace: "shop"}
	for _, tc := range []struct {
		name, spec string
		matches    []Request
		misses     []Request
	}{
		{"everything", `{precedence: 1, action: Exempt, match: [{}]}`, []Request{listPods, podLog, allPods, healthz}, nil},
		{"users and groups", `{precedence: 1, action: Exempt, match: [{users: [bob], groups: [dev]}]}`, []Request{listPods, scale}, []Request{allPods}},
		{"service account", `{precedence: 1, action: Exempt, match: [{serviceAccounts: [{namespace: ci, name: deployer}]}]}`, []Request{allPods}, []Request{listPods}},
		{"user agent glob", `{precedence: 1, action: Exempt, match: [{userAgents: ["kubectl/*", "*python*"]}]}`, []Request{listPods, podLog}, []Request{allPods, healthz}},
		{"verbs", `{precedence: 1, action: Exempt, match: [{verbs: [list, watch]}]}`, []Request{listPods, allPods}, []Request{podLog, scale}},
		{"plain resource is not its subresource", `{precedence: 1, action: Exempt, match: [{resources: [{apiGroups: [""], resources: [pods]}]}]}`, []Request{listPods, allPods}, []Request{podLog, healthz}},
		{"subresource", `{precedence: 1, action: Exempt, match: [{resources: [{apiGroups: ["*"], resources: ["pods/log", "*/scale"]}]}]}`, []Request{podLog, scale}, []Request{listPods}},
		{"any resource, any subresource", `{precedence: 1, action: Exempt, match: [{resources: [{apiGroups: ["*"], resources: ["*"]}]}]}`, []Request{podLog, scale, listPods}, []Request{healthz}},
		{"group must match", `{precedence: 1, action: Exempt, match: [{resources: [{apiGroups: [""], resources: ["*/scale"]}]}]}`, nil, []Request{scale}},
		{"namespaces leave out all-namespace lists", `{precedence: 1, action: Exempt, match: [{namespaces: ["*"]}]}`, []Request{listPods, scale}, []Request{allPods, healthz}},
		{"named namespace", `{precedence: 1, action: Exempt, match: [{namespaces: [other]}]}`, nil, []Request{listPods}},
		{"non-resource URLs", `{precedence: 1, action: Exempt, match: [{nonResourceURLs: ["/health*"]}]}`, []Request{healthz}, []Request{listPods}},
		{"clauses are or-ed, fields and-ed", `{precedence: 1, action: Exempt, match: [{users: [alice], verbs: [get]}, {verbs: [patch]}]}`, []Request{podLog, scale}, []Request{listPods}},
		{"except", `{precedence: 1, action: Exempt, match: [{verbs: [list]}], except: [{serviceAccounts: [{namespace: ci, name: deployer}]}]}`, []Request{listPods}, []Request{allPods}},
	} {
		p := policy(t, tc.name, tc.spec)
		for _, r := range tc.matches {
			if !p.Matches(r) {
				t.Errorf("%s: does not match %+v", tc.name, r)
			}
		}
		for _, r := range tc.misses {
			if p.Matches(r) {
				t.Errorf("%s: matches %+v", tc.name, r)
			}
		}
	}
}

func TestSelectByPrecedenceThenName(t *testing.T) {
	ps := []Policy{
		policy(t, "catch-all", `{precedence: 9000, action: Limit, limit: {qps: 10}, match: [{}]}`),
		policy(t, "b-lists", `{precedence: 100, action: Limit, limit: {qps: 1}, match: [{verbs: [list]}]}`),
		policy(t, "a-lists", `{precedence: 100, action: Reject, match: [{verbs: [list]}]}`),
		policy(t, "system", `{precedence: 10, action: Exempt, match: [{groups: ["system:masters"]}]}`),
	}
	Sort(ps)
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{User: "admin", Groups: []string{"system:masters"}, Verb: "list", IsResource: true}, "system"},
		{Request{User: "bob", Verb: "list", IsResource: true}, "a-lists"},
		{Request{User: "bob", Verb: "get", IsResource: true}, "catch-all"},
	} {
		if got := Select(ps, tc.r); got == nil || got.Name != tc.want {
			t.Errorf("%+v: selected %v, want %s", tc.r, got, tc.want)
		}
	}
	if got := Select(ps[:1], Request{Verb: "get"}); got != nil {
		t.Errorf("a get matched the lists-only policy %s", got.Name)
	}
}

// A clause on whom the client impersonates narrows a policy for that
// client; it never makes a client's request match a policy that does not
// name the client.
func TestImpersonatedMatchesOnlyTheNamedClientsImpersonating(t *testing.T) {
	ps := []Policy{
		policy(t, "platform-team-a", `{precedence: 10, action: Limit, limit: {qps: 5}, match: [{serviceAccounts: [{namespace: platform, name: api}], impersonated: {groups: [team-a]}}]}`),
		policy(t, "alone", `{precedence: 20, action: Exempt, match: [{impersonated: {users: [alice]}}]}`),
		policy(t, "platform", `{precedence: 30, action: Limit, limit: {qps: 50}, match: [{serviceAccounts: [{namespace: platform, name: api}]}]}`),
		policy(t, "support", `{precedence: 40, action: Reject, match: [{users: [support]}]}`),
	}
	Sort(ps)
	api := "system:serviceaccount:platform:api"
	for _, tc := range []struct {
		name string
		r    Request
		want string
	}{
		{"the platform API for team-a", Request{User: api, Impersonated: &authenticationv1.UserInfo{Username: "alice", Groups: []string{"team-a"}}}, "platform-team-a"},
		{"the platform API for team-b", Request{User: api, Impersonated: &authenticationv1.UserInfo{Username: "bob", Groups: []string{"team-b"}}}, "platform"},
		{"the platform API for itself", Request{User: api}, "platform"},
		{"support impersonating alice (a clause without a client never matches)", Request{User: "support", Impersonated: &authenticationv1.UserInfo{Username: "alice"}}, "support"},
		{"support impersonating team-a", Request{User: "support", Impersonated: &authenticationv1.UserInfo{Username: "alice", Groups: []string{"team-a"}}}, "support"},
		{"team-a itself", Request{User: "alice", Groups: []string{"team-a"}}, ""},
	} {
		got := ""
		if p := Select(ps, tc.r); p != nil {
			got = p.Name
		}
		if got != tc.want {
			t.Errorf("%s: selected %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"kubectl/*", "kubectl/v1.36 (linux/amd64)", true},
		{"kubectl/*", "xkubectl/v1", false},
		{"*python*", "my-python-app/1", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
		{"exact", "exact", true},
		{"*", "", true},
	} {
		if got := Glob(tc.pattern, tc.s); got != tc.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// clock steps a simulated time; the limiter takes time as an argument.
type clock struct{ now time.Time }

func (c *clock) tick(d time.Duration) time.Time { c.now = c.now.Add(d); return c.now }

// A noisy client far over a shared limit does not starve a quiet one: the
// quiet client's requests all pass while the noisy one gets about its
// share, and together they stay within the policy's rate.
func TestNoisyClientDoesNotStarveOthersInSharedPolicy(t *testing.T) {
	p := policy(t, "controllers", `{precedence: 1, action: Limit, limit: {qps: 20, burst: 20}, match: [{}]}`)
	l := NewLimiter()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	noisy := Request{User: "runaway", Verb: "list", IsResource: true}
	quiet := Request{User: "scheduler", Verb: "get", IsResource: true}
	var noisyOK, quietOK, quietSent int
	// 10 simulated seconds: the noisy client sends 500 requests/s, the
	// quiet one 5/s.
	for ms := range 10_000 {
		now := c.tick(time.Millisecond)
		if ms%2 == 0 {
			if v := l.Decide(&p, noisy, now); v.Allowed {
				noisyOK++
				v.Done()
			}
		}
		if ms%200 == 0 {
			quietSent++
			v := l.Decide(&p, quiet, now)
			if !v.Allowed {
				t.Fatalf("quiet client refused at %dms: %s", ms, v.Message)
			}
			quietOK++
			v.Done()
		}
	}
	// 20/s for 10s, the burst, and at most one burst of debt taken by
	// clients within their share.
	if total := noisyOK + quietOK; total > 20*10+2*20 {
		t.Errorf("%d requests admitted in 10s, over the policy's 20/s plus burst", total)
	}
	// It also gets what the quiet client leaves unused: 20/s minus 5/s.
	if noisyOK < 130 {
		t.Errorf("noisy client got %d requests in 10s; its share is 10/s, and 15/s are unused by the other", noisyOK)
	}
	t.Logf("noisy admitted %d of 5000, quiet %d of %d", noisyOK, quietOK, quietSent)
}

// Without fair sharing (fairShare: None) the same storm does starve the
// quiet client: what fairness is for.
func TestWithoutFairShareNoisyClientStarvesOthers(t *testing.T) {
	p := policy(t, "controllers", `{precedence: 1, action: Limit, limit: {qps: 20, burst: 20, fairShare: None}, match: [{}]}`)
	l := NewLimiter()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	refused := 0
	for ms := range 10_000 {
		now := c.tick(time.Millisecond)
		if v := l.Decide(&p, Request{User: "runaway"}, now); v.Allowed {
			v.Done()
		}
		if ms%200 == 0 {
			if v := l.Decide(&p, Request{User: "scheduler"}, now); !v.Allowed {
				refused++
			}
		}
	}
	if refused < 25 {
		t.Errorf("quiet client refused %d of 50 times without fair share; expected most", refused)
	}
}

func TestAloneClientGetsWholeSharedLimit(t *testing.T) {
	p := policy(t, "p", `{precedence: 1, action: Limit, limit: {qps: 10, burst: 10}, match: [{}]}`)
	l := NewLimiter()
	now := time.Unix(1_800_000_000, 0)
	for i := range 10 {
		if v := l.Decide(&p, Request{User: "only"}, now); !v.Allowed {
			t.Fatalf("request %d of a burst of 10 refused: %s", i, v.Message)
		}
	}
	v := l.Decide(&p, Request{User: "only"}, now)
	if v.Allowed || v.Reason != "rate" || !strings.Contains(v.Message, `TrafficPolicy "p"`) {
		t.Fatalf("11th request: %+v, want a rate refusal naming the policy", v)
	}
	if v.RetryAfter <= 0 || v.RetryAfter > 200*time.Millisecond {
		t.Errorf("wait %v, want about 100ms (one token at 10/s)", v.RetryAfter)
	}
}

func TestPerUserBucketsAreIndependent(t *testing.T) {
	p := policy(t, "per-user", `{precedence: 1, action: Limit, limit: {qps: 2, key: User}, match: [{}]}`)
	l := NewLimiter()
	now := time.Unix(1_800_000_000, 0)
	for _, u := range []string{"a", "b", "c"} {
		for i := range 2 {
			if v := l.Decide(&p, Request{User: u}, now); !v.Allowed {
				t.Fatalf("user %s request %d refused: %s", u, i, v.Message)
			}
		}
		if v := l.Decide(&p, Request{User: u}, now); v.Allowed || !strings.Contains(v.Message, `user "`+u+`" is over it`) {
			t.Fatalf("user %s third request: %+v", u, v)
		}
	}
}

func TestInFlightLimitSharedFairlyAndReleased(t *testing.T) {
	p := policy(t, "lists", `{precedence: 1, action: Limit, limit: {maxInFlight: 4}, match: [{}]}`)
	l := NewLimiter()
	now := time.Unix(1_800_000_000, 0)
	// Two clients active: each may hold 2 of the 4 slots.
	l.Decide(&p, Request{User: "b"}, now).Done()
	var held []Verdict
	for i := range 2 {
		v := l.Decide(&p, Request{User: "a"}, now)
		if !v.Allowed {
			t.Fatalf("a's request %d refused: %s", i, v.Message)
		}
		held = append(held, v)
	}
	v := l.Decide(&p, Request{User: "a"}, now)
	if v.Allowed || v.Reason != "in-flight" {
		t.Fatalf("a's third concurrent request: %+v, want refused over its in-flight share", v)
	}
	if v := l.Decide(&p, Request{User: "b"}, now); !v.Allowed {
		t.Fatalf("b refused while a holds only its share: %s", v.Message)
	}
	// Watches do not hold slots.
	if v := l.Decide(&p, Request{User: "a", Verb: "watch"}, now); !v.Allowed {
		t.Fatalf("a's watch refused: %s", v.Message)
	}
	held[0].Done()
	held[0].Done() // twice is once
	if v := l.Decide(&p, Request{User: "a"}, now); !v.Allowed {
		t.Fatalf("a refused after one of its requests ended: %s", v.Message)
	}
	if v := l.Decide(&p, Request{User: "a"}, now); v.Allowed {
		t.Fatal("a admitted a third concurrent request after a double Done")
	}
}

func TestEditedPolicyStartsFresh(t *testing.T) {
	p := policy(t, "p", `{precedence: 1, action: Limit, limit: {qps: 1}, match: [{}]}`)
	l := NewLimiter()
	now := time.Unix(1_800_000_000, 0)
	l.Decide(&p, Request{User: "u"}, now)
	if l.Decide(&p, Request{User: "u"}, now).Allowed {
		t.Fatal("second request admitted at 1/s")
	}
	p.Generation, p.Spec.Limit.QPS = 2, ptr.To[int32](100)
	if v := l.Decide(&p, Request{User: "u"}, now); !v.Allowed {
		t.Fatalf("refused after the limit was raised: %s", v.Message)
	}
}

func TestKeysBeyondMaxShareOverflowBucket(t *testing.T) {
	p := policy(t, "per-agent", `{precedence: 1, action: Limit, limit: {qps: 1, key: UserAgent}, match: [{}]}`)
	l := NewLimiter()
	now := time.Unix(1_800_000_000, 0)
	for i := range MaxKeys {
		l.Decide(&p, Request{UserAgent: "agent-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)}, now)
	}
	if v := l.Decide(&p, Request{UserAgent: "one-more"}, now); !v.Allowed {
		t.Fatalf("first key beyond the bound refused: %s", v.Message)
	}
	if v := l.Decide(&p, Request{UserAgent: "and-another"}, now); v.Allowed {
		t.Fatal("keys beyond the bound do not share one bucket")
	}
	if n := len(l.policies["per-agent"].keys); n != MaxKeys+1 {
		t.Errorf("%d buckets, want %d plus the overflow one", n, MaxKeys)
	}
}

func TestRetryAfterIsJitteredAndAtLeastTheWait(t *testing.T) {
	for _, tc := range []struct {
		wait     time.Duration
		jitter   float64
		min, max int
	}{
		{0, 0, 1, 1},
		{100 * time.Millisecond, 0.99, 1, 2},
		{2500 * time.Millisecond, 0, 3, 3},
		{2500 * time.Millisecond, 0.99, 3, 6},
	} {
		got := throttled(tc.wait, tc.jitter)
		if got < tc.min || got > tc.max {
			t.Errorf("Retry-After for a wait of %v, jitter %v = %d, want %d..%d", tc.wait, tc.jitter, got, tc.min, tc.max)
		}
	}
	if throttled(time.Second, 0) == throttled(time.Second, 0.9) {
		t.Error("jitter does not change Retry-After")
	}
}

// throttled is the Retry-After, in seconds, the gateway sends for a
// Throttled refusal that would be admitted after wait.
func throttled(wait time.Duration, jitter float64) int {
	return int(Spread(verdict.Verdict{Refusal: verdict.Throttled, RetryAfter: wait}, jitter).RetryAfter / time.Second)
}
