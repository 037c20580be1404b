package traffic

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// FuzzGlobLikeRegexp: Glob, which matches TrafficPolicy user agents, says
// what the same pattern says as an anchored regular expression with * as
// .* and everything else literal.
func FuzzGlobLikeRegexp(f *testing.F) {
	for _, s := range [][2]string{
		{"kubectl/*", "kubectl/v1.36.3 (linux/amd64) kubernetes/abc"},
		{"*operator*", "my-operator/1.0"}, {"a*a*a", "aaa"}, {"a*a*a", "aa"}, {"**", ""}, {"*", "x"}, {"x", "x*"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		parts := strings.Split(pattern, "*")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re, err := regexp.Compile(`(?s)\A` + strings.Join(parts, ".*") + `\z`)
		if err != nil {
			return
		}
		if got, want := Glob(pattern, s), re.MatchString(s); got != want {
			t.Fatalf("Glob(%q, %q) = %v, want %v", pattern, s, got, want)
		}
	})
}

// FuzzPolicySelects: for any TrafficPolicy spec and any request, matching
// never panics; a clause that its own except clause repeats selects
// nothing; and a clause on the impersonated user alone selects no one (it
// would let a client leave its own policy by impersonating).
func FuzzPolicySelects(f *testing.F) {
	for _, s := range []struct{ spec, method, target, agent string }{
		{`{"match":[{"users":["alice"],"verbs":["list"],"resources":[{"apiGroups":[""],"resources":["pods"]}]}]}`, "GET", "/api/v1/namespaces/a/pods", "kubectl/v1.36"},
		{`{"match":[{"groups":["system:authenticated"],"namespaces":["*"]}],"except":[{"userAgents":["kube-controller-manager/*"]}]}`, "DELETE", "/apis/apps/v1/namespaces/shop/deployments/web", "kube-controller-manager/v1.36"},
		{`{"match":[{"nonResourceURLs":["/metrics","/debug/*"]}]}`, "GET", "/debug/pprof/heap", "curl/8"},
		{`{"match":[{"impersonated":{"users":["admin"]}}]}`, "GET", "/api/v1/secrets", "x"},
		{`{"match":[{"resources":[{"apiGroups":["*"],"resources":["*/status","pods/*"]}]}]}`, "PATCH", "/api/v1/namespaces/a/pods/p/status", "x"},
		{`{"match":[{"users":["*"],"resources":[{"apiGroups":[""],"resources":["pods"]}]}]}`, "GET", "/api/v1/namespaces/a/pods?watch=1", "x"},
	} {
		f.Add([]byte(s.spec), s.method, s.target, s.agent, "alice")
	}
	f.Fuzz(func(t *testing.T, specJSON []byte, method, target, agent, user string) {
		var spec v1alpha1.TrafficPolicySpec
		if json.Unmarshal(specJSON, &spec) != nil || !strings.HasPrefix(target, "/") {
			return
		}
		var hr *http.Request
		func() {
			defer func() { _ = recover() }() // httptest panics on targets net/http would refuse
			hr = httptest.NewRequest("GET", "/", nil)
			hr.Method = method
			u, err := hr.URL.Parse(target)
			if err != nil {
				hr = nil
				return
			}
			hr.URL, hr.RequestURI = u, target
		}()
		if hr == nil {
			return
		}
		hr.Header.Set("User-Agent", agent)
		r := Describe(hr)
		r.User, r.Groups = user, []string{"system:authenticated"}
		p := Policy{Name: "p", Spec: spec}
		p.Matches(r)
		if len(spec.Match) > 0 {
			self := Policy{Name: "self", Spec: v1alpha1.TrafficPolicySpec{Match: spec.Match, Except: spec.Match}}
			if self.Matches(r) {
				t.Fatalf("a policy whose except repeats its match selected %+v", r)
			}
			for _, c := range spec.Match {
				if c.Impersonated != nil && len(c.Users)+len(c.Groups)+len(c.ServiceAccounts) == 0 {
					lone := Policy{Name: "lone", Spec: v1alpha1.TrafficPolicySpec{Match: []v1alpha1.TrafficMatch{c}}}
					if lone.Matches(r) {
						t.Fatalf("a clause on the impersonated user alone selected %+v", r)
					}
				}
			}
		}
	})
}
