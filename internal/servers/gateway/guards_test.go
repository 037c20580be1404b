package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/spacebrake"
	"github.com/rampart-io/rampart/internal/protection/traffic"
	"github.com/rampart-io/rampart/internal/servers/gateway/identity"
	"github.com/rampart-io/rampart/internal/servers/gateway/upstream"
)

// guardedGateway is a gateway that is never served: its guards decide
// against fake TokenReviews and SubjectAccessReviews and the policies
// below, in process. Tokens are user names; "broken" fails the review,
// "nobody" is not accepted, "root" is in system:masters. Only "admin"
// may impersonate, and a review for "flaky" fails.
//
// Its upstream pools: the default one, heavy, and down (whose API server
// fails /readyz). grace's requests are routed to heavy; heidi's to down,
// refused; ivan's to down, sent to the default pool instead.
func guardedGateway(t *testing.T) *Gateway {
	t.Helper()
	g := guardedGatewayOf(t, &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "gateway"}, Options{
		UpstreamPools: []UpstreamPool{{Name: "heavy", URLs: []string{"https://127.0.0.2:1"}}, {Name: "down", URLs: []string{"https://127.0.0.3:1"}}},
		Namespace:     "rampart-system", EtcdSpaceBrakeShare: 0.9})
	down := g.pools.Named("down")
	down.Checked(down.Servers[0], false, time.Now())
	// etcd at 95% of its quota, just reported: the brake holds.
	g.space.reading.Store(&spacebrake.Reading{Synced: true, Report: &space.Report{
		Verdict: space.Verdict{Level: space.Warning, Share: 0.95, Fullest: space.Member{Name: "etcd-0", DBSize: 95, Quota: 100}},
		At:      time.Now(), Every: time.Minute}})
	return g
}

// guardedGatewayOf is guardedGateway to the API servers of cfg and opts.
func guardedGatewayOf(t *testing.T, cfg *rest.Config, opts Options) *Gateway {
	t.Helper()
	opts.Log = slog.New(slog.DiscardHandler)
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		switch tr.Spec.Token {
		case "broken":
			return true, nil, errors.New("connection refused")
		case "nobody":
			return true, tr, nil
		case "root":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "root", Groups: []string{"system:masters"}}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: tr.Spec.Token, Groups: []string{"system:authenticated"}}}
		}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		if sar.Spec.User == "flaky" {
			return true, nil, errors.New("etcd is slow")
		}
		sar.Status.Allowed = sar.Spec.User == "admin"
		return true, sar, nil
	})
	g.auth = identity.New(client.AuthenticationV1().TokenReviews(), client.AuthorizationV1().SubjectAccessReviews(), identity.Defaults)
	user := func(name string) []v1alpha1.TrafficMatch {
		return []v1alpha1.TrafficMatch{{Subjects: v1alpha1.Subjects{Users: []string{name}}}}
	}
	one := ptr.To[int32](1)
	ps := []traffic.Policy{
		{Name: "t-reject", Spec: v1alpha1.TrafficPolicySpec{Match: user("mallory"), Action: v1alpha1.ActionReject, RejectMessage: "Use the staging cluster."}},
		{Name: "t-breaker", Spec: v1alpha1.TrafficPolicySpec{Match: user("carol"), Action: v1alpha1.ActionLimit, Breaker: &v1alpha1.TrafficBreaker{Open: true}}},
		{Name: "t-limit", Spec: v1alpha1.TrafficPolicySpec{Match: user("dave"), Action: v1alpha1.ActionLimit,
			Limit: &v1alpha1.TrafficLimit{QPS: one, Burst: one, Key: v1alpha1.KeyUser, FairShare: v1alpha1.FairShareNone}}},
		{Name: "t-watch", Spec: v1alpha1.TrafficPolicySpec{Match: user("erin"), Action: v1alpha1.ActionLimit,
			Watch: &v1alpha1.TrafficWatchGuard{NewPerSecond: one, NewBurst: one, Key: v1alpha1.ClientUser}}},
		{Name: "t-exempt", Spec: v1alpha1.TrafficPolicySpec{Match: user("frank"), Action: v1alpha1.ActionExempt}},
		{Name: "t-route", Spec: v1alpha1.TrafficPolicySpec{Match: user("grace"), Action: v1alpha1.ActionRoute, Route: &v1alpha1.TrafficRoute{Pool: "heavy", OnUnavailable: v1alpha1.RouteReject}}},
		{Name: "t-route-down", Spec: v1alpha1.TrafficPolicySpec{Match: user("heidi"), Action: v1alpha1.ActionRoute, Route: &v1alpha1.TrafficRoute{Pool: "down", OnUnavailable: v1alpha1.RouteReject}}},
		{Name: "t-route-fallback", Spec: v1alpha1.TrafficPolicySpec{Match: user("ivan"), Action: v1alpha1.ActionRoute, Route: &v1alpha1.TrafficRoute{Pool: "down", OnUnavailable: v1alpha1.RouteToDefault}}},
	}
	traffic.Sort(ps)
	g.policies.Store(&ps)
	return g
}

// get is a GET of path by the client with token, with extra headers
// as name, value pairs.
func get(token, path string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://gateway"+path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// post is a POST (a create) of path by the client with token, with extra
// headers as name, value pairs.
func post(token, path string, headers ...string) *http.Request {
	r := get(token, path, headers...)
	r.Method = http.MethodPost
	return r
}

// decide runs the chain as ServeHTTP does, without forwarding, and
// returns the first refusal (or pass) and the exchange.
func decide(g *Gateway, r *http.Request) (verdict.Verdict, *exchange) {
	info := traffic.Info(r)
	x := &exchange{r: r, info: info, req: traffic.FromInfo(info, r.URL), policyName: noPolicy}
	defer x.end()
	for _, guard := range g.guards {
		if v := guard(x); !v.Allowed {
			return v, x
		}
	}
	return pass, x
}

const (
	pods       = "/api/v1/namespaces/shop/pods"
	configMaps = "/api/v1/namespaces/shop/configmaps"
)

func TestGuardsVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// requests are sent in turn; the verdict of the last is checked.
		requests []*http.Request
		code     int
		reason   string
		// retry says whether a Retry-After comes with the refusal.
		retry bool
		// message must be part of the refusal's message.
		message string
		// as is whom a passed request is forwarded as, policy its policy,
		// pool its upstream pool ("": the default pool).
		as, policy, pool string
	}{
		{name: "anonymous passes", requests: []*http.Request{get("", pods)}, as: "system:anonymous", policy: noPolicy},
		{name: "a bearer token passes as its user", requests: []*http.Request{get("alice", pods)}, as: "alice", policy: noPolicy},
		{name: "an unknown token", requests: []*http.Request{get("nobody", pods)}, code: 401, reason: "unauthenticated", message: "invalid bearer token"},
		{name: "basic authentication", requests: []*http.Request{get("", pods, "Authorization", "Basic eDp5")}, code: 401, reason: "unauthenticated", message: "unsupported Authorization header"},
		{name: "a failed TokenReview", requests: []*http.Request{get("broken", pods)}, code: 503, reason: "unauthenticated", message: "connection refused"},
		{name: "two users to impersonate", requests: []*http.Request{get("admin", pods, "Impersonate-User", "a", "Impersonate-User", "b")}, code: 400, message: "more than one user"},
		{name: "impersonation without the right", requests: []*http.Request{get("alice", pods, "Impersonate-User", "bob")}, code: 403, reason: "impersonation", message: "cannot impersonate user \"bob\""},
		{name: "impersonation whose review fails", requests: []*http.Request{get("flaky", pods, "Impersonate-User", "bob")}, code: 503, message: "etcd is slow"},
		{name: "impersonation with the right", requests: []*http.Request{get("admin", pods, "Impersonate-User", "bob")}, as: "bob", policy: noPolicy},
		{name: "system:masters", requests: []*http.Request{get("root", pods)}, code: 403, reason: "masters", message: "system:masters"},
		{name: "impersonating system:masters", requests: []*http.Request{get("admin", pods, "Impersonate-User", "bob", "Impersonate-Group", "system:masters")}, code: 403, reason: "masters"},
		{name: "a Reject policy", requests: []*http.Request{get("mallory", pods)}, code: 403, reason: "rejected", message: `TrafficPolicy "t-reject" refuses this request (list /api/v1/namespaces/shop/pods by mallory). Use the staging cluster.`},
		{name: "an open breaker", requests: []*http.Request{get("carol", pods)}, code: 429, reason: "breaker", retry: true, message: "t-breaker"},
		{name: "within the rate", requests: []*http.Request{get("dave", pods)}, as: "dave", policy: "t-limit"},
		{name: "over the rate", requests: []*http.Request{get("dave", pods), get("dave", pods)}, code: 429, reason: "rate", retry: true, message: "t-limit"},
		{name: "a first watch", requests: []*http.Request{get("erin", pods+"?watch=true&resourceVersion=5")}, as: "erin", policy: "t-watch"},
		{name: "new watches over their rate", requests: []*http.Request{get("erin", pods+"?watch=true&resourceVersion=5"), get("erin", pods+"?watch=true&resourceVersion=5")},
			code: 429, reason: "watch-rate", retry: true, message: "t-watch"},
		{name: "LISTs are not watches", requests: []*http.Request{get("erin", pods), get("erin", pods)}, as: "erin", policy: "t-watch"},
		{name: "an Exempt policy", requests: []*http.Request{get("frank", pods), get("frank", pods)}, as: "frank", policy: "t-exempt"},
		{name: "a Route policy", requests: []*http.Request{get("grace", pods), get("grace", pods)}, as: "grace", policy: "t-route", pool: "heavy"},
		{name: "a Route policy whose pool is down", requests: []*http.Request{get("heidi", pods)}, code: 503, reason: "pool-unavailable", retry: true,
			message: `TrafficPolicy "t-route-down" routes this request to upstream pool "down", and none of that pool's API servers is available now`},
		{name: "a Route policy falling back", requests: []*http.Request{get("ivan", pods)}, as: "ivan", policy: "t-route-fallback"},
		{name: "a create while etcd is nearly full", requests: []*http.Request{post("judy", configMaps)}, code: 429, reason: "etcd-space",
			message: "rampart etcd space recover --dir DIR"},
		{name: "an eviction while etcd is nearly full", requests: []*http.Request{post("judy", pods+"/web-0/eviction")}, as: "judy", policy: noPolicy},
		{name: "a node's create while etcd is nearly full", requests: []*http.Request{post("admin", configMaps, "Impersonate-User", "system:node:n1", "Impersonate-Group", "system:nodes")},
			as: "system:node:n1", policy: noPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := guardedGateway(t)
			var v verdict.Verdict
			var x *exchange
			for _, r := range tc.requests {
				v, x = decide(g, r)
			}
			code := 0 // passed
			if !v.Allowed {
				code = int(status(v).ErrStatus.Code)
			}
			if code != tc.code || v.Reason != tc.reason {
				t.Fatalf("verdict %d %q (%s), want %d %q", code, v.Reason, v.Message, tc.code, tc.reason)
			}
			if (v.RetryAfter > 0) != tc.retry {
				t.Errorf("Retry-After %v, want one: %v", v.RetryAfter, tc.retry)
			}
			if !strings.Contains(v.Message, tc.message) {
				t.Errorf("message %q lacks %q", v.Message, tc.message)
			}
			if tc.code == 0 && (x.as.Name != tc.as || x.policyName != tc.policy) {
				t.Errorf("forwarded as %q under policy %q, want %q under %q", x.as.Name, x.policyName, tc.as, tc.policy)
			}
			if tc.code == 0 {
				want := cmp.Or(tc.pool, upstream.DefaultPool)
				got := g.pools.Default().Name
				if x.pool != nil {
					got = x.pool.Name
				}
				if got != want {
					t.Errorf("sent to pool %q, want %q", got, want)
				}
			}
		})
	}
}

// Every guard's refusal reaches the client as the API server would answer
// it: a metav1.Status with the code, its reason, the guard's message, and
// for a 429 a Retry-After in the header and in the details.
func TestRefusalsAreAPIStatuses(t *testing.T) {
	for _, tc := range []struct {
		guard    string
		requests []*http.Request
		code     int
		reason   metav1.StatusReason
		retry    bool
	}{
		{"authenticate", []*http.Request{get("nobody", pods)}, 401, metav1.StatusReasonUnauthorized, false},
		{"authenticate", []*http.Request{get("broken", pods)}, 503, metav1.StatusReasonServiceUnavailable, false},
		{"impersonate", []*http.Request{get("admin", pods, "Impersonate-Uid", "1")}, 400, metav1.StatusReasonBadRequest, false},
		{"impersonate", []*http.Request{get("alice", pods, "Impersonate-User", "bob")}, 403, metav1.StatusReasonForbidden, false},
		{"refuseMasters", []*http.Request{get("root", pods)}, 403, metav1.StatusReasonForbidden, false},
		{"reject", []*http.Request{get("mallory", pods)}, 403, metav1.StatusReasonForbidden, false},
		{"breaker", []*http.Request{get("carol", pods)}, 429, metav1.StatusReasonTooManyRequests, true},
		{"limit", []*http.Request{get("dave", pods), get("dave", pods)}, 429, metav1.StatusReasonTooManyRequests, true},
		{"guardListWatch", []*http.Request{get("erin", pods+"?watch=1&resourceVersion=1"), get("erin", pods+"?watch=1&resourceVersion=1")}, 429, metav1.StatusReasonTooManyRequests, true},
		{"route", []*http.Request{get("heidi", pods)}, 503, metav1.StatusReasonServiceUnavailable, true},
		{"brakeSpace", []*http.Request{post("judy", configMaps)}, 429, metav1.StatusReasonTooManyRequests, false},
	} {
		t.Run(tc.guard+"/"+strconv.Itoa(tc.code), func(t *testing.T) {
			g := guardedGateway(t)
			var w *httptest.ResponseRecorder
			for _, r := range tc.requests {
				w = httptest.NewRecorder()
				g.ServeHTTP(w, r)
			}
			if w.Code != tc.code {
				t.Fatalf("answered %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var st metav1.Status
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
				t.Fatalf("body is no Status: %v: %s", err, w.Body)
			}
			if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || st.Code != int32(tc.code) || st.Reason != tc.reason || st.Message == "" {
				t.Errorf("Status %+v, want code %d reason %s and a message", st, tc.code, tc.reason)
			}
			header := w.Header().Get("Retry-After")
			if !tc.retry {
				if header != "" || st.Details != nil {
					t.Errorf("Retry-After %q, details %+v on a refusal that should not be retried as is", header, st.Details)
				}
				return
			}
			n, err := strconv.Atoi(header)
			if err != nil || n < 1 || st.Details == nil || st.Details.RetryAfterSeconds != int32(n) {
				t.Errorf("Retry-After header %q and details %+v, want the same number of seconds in both", header, st.Details)
			}
		})
	}
}

// The refusal of a request the gateway could not forward (no API server
// reachable) has the same shape.
func TestUpstreamErrorIsAPIStatus(t *testing.T) {
	g := guardedGateway(t)
	w := httptest.NewRecorder()
	g.upstreamError(w, get("", pods), errors.New("dial tcp: connection refused"))
	var st metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || w.Code != http.StatusBadGateway || st.Code != http.StatusBadGateway || st.Reason != metav1.StatusReasonInternalError ||
		!strings.Contains(st.Message, "could not reach a kube-apiserver") {
		t.Errorf("answered %d %+v (%v)", w.Code, st, err)
	}
}
