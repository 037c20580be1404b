package protection

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/restmapper"
)

// discovered is what an API server's discovery says of a few core
// resources (kube-apiserver serves SingularName for each).
var discovered = []*restmapper.APIGroupResources{{
	Group: metav1.APIGroup{Name: "", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "v1", Version: "v1"}},
	VersionedResources: map[string][]metav1.APIResource{"v1": {
		{Name: "endpoints", SingularName: "endpoints", Namespaced: true, Kind: "Endpoints"},
		{Name: "componentstatuses", SingularName: "componentstatus", Kind: "ComponentStatus"},
		{Name: "namespaces", SingularName: "namespace", Kind: "Namespace"},
	}},
}}

func TestResourceNameTakesTheSingularFromDiscovery(t *testing.T) {
	mapper := restmapper.NewDiscoveryRESTMapper(discovered)
	for _, tt := range []struct {
		gr   schema.GroupResource
		want string
	}{
		{schema.GroupResource{Resource: "endpoints"}, "endpoints"},
		{schema.GroupResource{Resource: "componentstatuses"}, "componentstatus"},
		{schema.GroupResource{Resource: "namespaces"}, "namespace"},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "deployments.apps"},
	} {
		o := Object{Resource: tt.gr, Name: "x", Singular: Singular(mapper, tt.gr)}
		if got := o.ResourceName(); got != tt.want {
			t.Errorf("ResourceName(%s) = %q, want %q", tt.gr, got, tt.want)
		}
		if got, want := o.Ref(), tt.want+"/x"; got != want {
			t.Errorf("Ref(%s) = %q, want %q", tt.gr, got, want)
		}
	}
}

func TestResourceNameWithoutDiscoveryGuesses(t *testing.T) {
	if got := (Object{Resource: schema.GroupResource{Resource: "pods"}}).ResourceName(); got != "pod" {
		t.Errorf("ResourceName(pods) = %q, want pod", got)
	}
	if got := Singular(nil, schema.GroupResource{Resource: "endpoints"}); got != "" {
		t.Errorf("Singular without a mapper = %q, want empty", got)
	}
	unknown := restmapper.NewDiscoveryRESTMapper(discovered)
	if got := Singular(unknown, schema.GroupResource{Resource: "widgets"}); got != "" {
		t.Errorf("Singular(widgets) = %q, want empty for a resource discovery does not serve", got)
	}
}
