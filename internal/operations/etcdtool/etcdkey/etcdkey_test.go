package etcdkey_test

import (
	"testing"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/etcdkey"
)

func TestParseReadsTheAPIServersKeys(t *testing.T) {
	for key, want := range map[string]etcdkey.Key{
		"/registry/configmaps/shop/cart":                               {Resource: "configmaps", Namespace: "shop", Name: "cart"},
		"/registry/namespaces/shop":                                    {Resource: "namespaces", Name: "shop"},
		"/registry/services/specs/default/kubernetes":                  {Resource: "services/specs", Namespace: "default", Name: "kubernetes"},
		"/registry/apiextensions.k8s.io/customresourcedefinitions/a.b": {Resource: "apiextensions.k8s.io/customresourcedefinitions", Name: "a.b"},
		"/registry/example.com/widgets/shop/w1":                        {Resource: "example.com/widgets", Namespace: "shop", Name: "w1"},
		"compact_rev_key":                                              {Resource: "compact_rev_key", Name: "compact_rev_key"},
	} {
		if got := etcdkey.Parse(key); got != want {
			t.Errorf("Parse(%q) = %+v, want %+v", key, got, want)
		}
	}
	g, r := etcdkey.Parse("/registry/example.com/widgets/shop/w1").GroupResource()
	if g != "example.com" || r != "widgets" {
		t.Errorf("GroupResource = %q %q", g, r)
	}
	if g, r := etcdkey.Parse("/registry/services/specs/default/kubernetes").GroupResource(); g != "" || r != "services" {
		t.Errorf("services/specs GroupResource = %q %q", g, r)
	}
}
