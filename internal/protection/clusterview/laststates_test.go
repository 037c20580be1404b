package clusterview

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

// TestLastStatesHoldFullObjects: the informers the outside-API watch
// reads hold whole objects (what it stores when one vanishes), one per
// resource and selector, and a resource the manager may not watch is
// asked about once and never watched. The leader's informer of a
// resource's labelled objects serves the views in place of theirs.
func TestLastStatesHoldFullObjects(t *testing.T) {
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "shop", "name": "settings", "labels": map[string]any{"rampart.io/protection": "always"}},
		"data":     map[string]any{"v": "kept"}}}
	cms := configMaps.WithVersion("v1")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{cms: "ConfigMapList", nodes.WithVersion("v1"): "NodeList"}, cm)
	v := newTestViewOf(t, dyn)
	var asked []schema.GroupVersionResource
	v.mayWatch = func(_ context.Context, gvr schema.GroupVersionResource) bool {
		asked = append(asked, gvr)
		return gvr != nodes.WithVersion("v1")
	}
	// The views' metadata informer of the labelled ConfigMaps, started.
	var stopped atomic.Bool
	v.labelled[cms] = &crInformer{informer: v.metadataInformer(cms, "rampart.io/protection"), cancel: func() { stopped.Store(true) }}
	v.labelsWatched.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stores := make(chan cache.Store, 2)
	handler := func(s cache.Store) cache.ResourceEventHandler {
		stores <- s
		return cache.ResourceEventHandlerFuncs{}
	}
	for _, c := range []struct {
		gvr      schema.GroupVersionResource
		selector string
		started  bool
	}{
		{cms, "rampart.io/protection", true},
		{cms, "rampart.io/protection", false}, // runs already
		{cms, "keep=yes", true},
		{nodes.WithVersion("v1"), "rampart.io/protection", false}, // may not watch
		{nodes.WithVersion("v1"), "rampart.io/protection", false}, // not asked again
		{secretsV1, "", false},                                    // never watched
	} {
		started, err := v.LastStates.Watch(ctx, c.gvr, c.selector, handler)
		if err != nil || started != c.started {
			t.Errorf("Watch(%s, %q) = %v, %v; want %v", c.gvr.Resource, c.selector, started, err, c.started)
		}
	}
	if want := []schema.GroupVersionResource{cms, cms, nodes.WithVersion("v1")}; !slices.Equal(asked, want) {
		t.Errorf("access asked for %v, want %v", asked, want)
	}
	store := <-stores
	deadline := time.Now().Add(10 * time.Second)
	for len(store.List()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got, ok, _ := store.GetByKey("shop/settings")
	u, _ := got.(*unstructured.Unstructured)
	if !ok || u == nil {
		t.Fatalf("the store holds %v, want shop/settings", store.ListKeys())
	}
	if d, _, _ := unstructured.NestedString(u.Object, "data", "v"); d != "kept" {
		t.Errorf("the object held: %v, want the whole ConfigMap (data.v=kept)", u.Object)
	}
	// The views read the labelled ConfigMaps from it now, and their own
	// informer of them is stopped.
	for !stopped.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !stopped.Load() || v.labelledInformers()[0].GetStore() != store {
		t.Errorf("the views' informer of labelled ConfigMaps was not replaced by the full one")
	}
	if got := v.Deletion.ProtectedObjects("shop"); got.Count != 1 || !slices.Equal(got.Examples, []string{"configmaps/settings"}) {
		t.Errorf("ProtectedObjects(shop) = %d %v, want 1 [configmaps/settings]", got.Count, got.Examples)
	}
}

var secretsV1 = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
