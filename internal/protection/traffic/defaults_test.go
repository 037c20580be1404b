package traffic

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	chart "github.com/rampart-io/rampart/charts/rampart"
)

// The default policies keep the way out open: with rampart-default's
// breaker open, what a cold kubectl and `rampart gateway breaker close`
// send first (discovery, OpenAPI) and the TrafficPolicies themselves are
// matched by policies without a breaker, while every other request,
// non-resource ones included, stays behind rampart-default.
func TestDefaultPoliciesKeepTheBreakerReachable(t *testing.T) {
	var policies []Policy
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(chart.GatewayPolicies), 4096)
	for {
		var p v1alpha1.TrafficPolicy
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		policies = append(policies, Policy{Name: p.Name, Spec: p.Spec})
	}
	Sort(policies)
	for path, want := range map[string]string{
		"/api":                                 "rampart-discovery",
		"/api/v1":                              "rampart-discovery",
		"/apis":                                "rampart-discovery",
		"/apis/rampart.io/v1alpha1":            "rampart-discovery",
		"/openapi/v2":                          "rampart-discovery",
		"/openapi/v3":                          "rampart-discovery",
		"/openapi/v3/apis/rampart.io/v1alpha1": "rampart-discovery",
		"/version":                             "rampart-discovery",
		"/apis/rampart.io/v1alpha1/trafficpolicies":                 "rampart-control-plane",
		"/apis/rampart.io/v1alpha1/trafficpolicies/rampart-default": "rampart-control-plane",
		"/api/v1/namespaces/default/configmaps":                     "rampart-default",
		"/apis/apps/v1/deployments":                                 "rampart-default",
		"/healthz":                                                  "rampart-default",
		"/metrics":                                                  "rampart-default",
	} {
		r := Describe(httptest.NewRequest("GET", path, nil))
		r.User, r.Groups = "operator", []string{"system:authenticated"}
		p := Select(policies, r)
		if p == nil {
			t.Errorf("GET %s: no policy matches, want %s", path, want)
			continue
		}
		if p.Name != want {
			t.Errorf("GET %s: judged by %s, want %s", path, p.Name, want)
			continue
		}
		if want != "rampart-default" && p.Spec.Breaker != nil {
			t.Errorf("GET %s: %s has a breaker", path, p.Name)
		}
	}
	for _, p := range policies {
		if p.Name == "rampart-discovery" && (p.Spec.Action != v1alpha1.ActionLimit || p.Spec.Limit == nil || p.Spec.Limit.Key != v1alpha1.KeyUser) {
			t.Errorf("rampart-discovery is not limited per user: %+v", p.Spec)
		}
	}
}
