package backup

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// discoveryOf serves a fixed list of resources as the API server's
// preferred ones (the fake's ServerPreferredResources serves none).
type discoveryOf struct {
	*fakediscovery.FakeDiscovery
	lists []*metav1.APIResourceList
}

func (d discoveryOf) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return d.lists, nil
}

func res(name, kind string, namespaced bool, verbs ...string) metav1.APIResource {
	if len(verbs) == 0 {
		verbs = []string{"get", "list", "create", "delete"}
	}
	return metav1.APIResource{Name: name, Kind: kind, Namespaced: namespaced, Verbs: verbs}
}

func obj(apiVersion, kind, ns, name string, labels map[string]string, extra map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	for k, v := range extra {
		u.Object[k] = v
	}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetUID(k8stypes.UID("uid-" + ns + "-" + name))
	u.SetLabels(labels)
	return u
}

type cluster struct {
	creator *Creator
	store   storage.Dir
}

func newCluster(t testing.TB, key *recyclebin.Key) cluster {
	t.Helper()
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			res("namespaces", "Namespace", false), res("configmaps", "ConfigMap", true), res("secrets", "Secret", true),
			res("nodes", "Node", false), res("events", "Event", true), res("pods", "Pod", true), res("pods/log", "Pod", true, "get"),
			res("bindings", "Binding", true, "create"), res("componentstatuses", "ComponentStatus", false, "get", "list"),
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{res("widgets", "Widget", true)}},
		{GroupVersion: "apiextensions.k8s.io/v1", APIResources: []metav1.APIResource{res("customresourcedefinitions", "CustomResourceDefinition", false)}},
		{GroupVersion: "coordination.k8s.io/v1", APIResources: []metav1.APIResource{res("leases", "Lease", true)}},
		{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{res("clusterroles", "ClusterRole", false)}},
	}
	crd := func(group, plural string) *unstructured.Unstructured {
		return obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", plural+"."+group, nil,
			map[string]any{"spec": map[string]any{"group": group, "names": map[string]any{"plural": plural}}})
	}
	objects := []runtime.Object{
		obj("v1", "Namespace", "", "shop", nil, nil), obj("v1", "Namespace", "", "other", nil, nil),
		obj("v1", "ConfigMap", "shop", "prices", map[string]string{"tier": "gold"}, map[string]any{"data": map[string]any{"apple": "3"}}),
		obj("v1", "ConfigMap", "shop", "plain", nil, nil),
		obj("v1", "ConfigMap", "other", "b", nil, nil),
		obj("v1", "Secret", "shop", "db", nil, map[string]any{"data": map[string]any{"password": "Y2FuYXJ5LXVuaXQtOWQ="}}),
		obj("v1", "Node", "", "n1", nil, nil),
		obj("v1", "Event", "shop", "e1", nil, nil),
		obj("example.com/v1", "Widget", "shop", "gear", nil, nil),
		crd("example.com", "widgets"), crd("example.com", "gadgets"),
		obj("coordination.k8s.io/v1", "Lease", "shop", "leader", nil, nil),
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "reader", nil, nil),
	}
	listKinds := map[schema.GroupVersionResource]string{}
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			listKinds[gv.WithResource(r.Name)] = r.Kind + "List"
		}
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objects...)
	fake := &clienttesting.Fake{}
	fake.AddReactor("get", "version", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	disc := discoveryOf{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: fake, FakedServerVersion: &version.Info{GitVersion: "v1.36.3"}}, lists: lists}
	store := storage.Dir{Root: t.TempDir()}
	clock := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	return cluster{store: store, creator: &Creator{Discovery: disc, Dynamic: dyn, Store: store, Key: key, RampartVersion: "test",
		Now: func() time.Time { clock = clock.Add(time.Second); return clock }}}
}

func testKey(t testing.TB) *recyclebin.Key {
	k, err := recyclebin.NewKey(bytes.Repeat([]byte{3}, recyclebin.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func described(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.File.Described())
	}
	slices.Sort(out)
	return out
}

// A namespace's backup holds its objects, its Namespace and the CRDs of
// its custom resources, never nodes, events or leases nor other
// namespaces' objects or unrelated cluster-scoped ones; the Secret sealed,
// opened only with the key; the manifest counts it all.
func TestBackupOfANamespace(t *testing.T) {
	ctx := context.Background()
	key := testKey(t)
	c := newCluster(t, key)
	m, err := c.creator.Create(ctx, "shop-1", Selection{Namespaces: []string{"shop"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Objects != 6 || m.APIServerVersion != "v1.36.3" || m.Archive == nil || m.Archive.Size == 0 || m.Duration() <= 0 || !m.Consistent {
		t.Errorf("manifest: %+v", m)
	}
	for _, s := range []string{"nodes", "events", "leases.coordination.k8s.io", "componentstatuses"} {
		if !slices.ContainsFunc(m.Skipped, func(k Skipped) bool { return k.Resource == s && k.Reason != "" }) {
			t.Errorf("%s not said to be skipped: %+v", s, m.Skipped)
		}
	}
	_, objs, err := Read(ctx, c.store, "shop-1", key, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"configmaps/plain in namespace shop", "configmaps/prices in namespace shop",
		"customresourcedefinitions.apiextensions.k8s.io/widgets.example.com", "namespaces/shop",
		"secrets/db in namespace shop", "widgets.example.com/gear in namespace shop"}
	if got := described(objs); !slices.Equal(got, want) {
		t.Errorf("backup holds\n%q\nwant\n%q", got, want)
	}
	for _, o := range objs {
		if o.File.Resource == "secrets" && (o.File.KeyID != key.ID() || !strings.Contains(string(o.Data), "Y2FuYXJ5LXVuaXQtOWQ=")) {
			t.Errorf("the Secret: %+v, opened %q", o.File, o.Data)
		}
	}
	if _, sealed, err := Read(ctx, c.store, "shop-1", nil, nil); err != nil || slices.ContainsFunc(sealed, func(o Object) bool { return o.File.Resource == "secrets" && o.Data != nil }) {
		t.Errorf("without the key the Secret opened (%v)", err)
	}
	if _, err := c.creator.Create(ctx, "shop-1", Selection{}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second backup of the same name: %v", err)
	}
	listed, err := List(ctx, c.store)
	if err != nil || len(listed) != 1 || listed[0].Name != "shop-1" {
		t.Errorf("List: %+v, %v", listed, err)
	}
}

// A label selector over all namespaces keeps what it selects and the
// Namespace it lives in; cluster-scoped resources come with all
// namespaces; without a key a Secret is refused, named, with the way out.
func TestBackupSelection(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, nil)
	if _, err := c.creator.Create(ctx, "all", Selection{}); err == nil || !strings.Contains(err.Error(), "--exclude-resources secrets") {
		t.Errorf("a Secret with no key: %v", err)
	}
	if _, err := c.creator.Create(ctx, "gold", Selection{LabelSelector: "tier=gold"}); err != nil {
		t.Fatal(err)
	}
	_, objs, err := Read(ctx, c.store, "gold", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := described(objs); !slices.Equal(got, []string{"configmaps/prices in namespace shop", "namespaces/shop"}) {
		t.Errorf("tier=gold backs up %q", got)
	}
	if _, err := c.creator.Create(ctx, "no-secrets", Selection{ExcludeResources: []string{"secrets"}}); err != nil {
		t.Fatal(err)
	}
	_, objs, _ = Read(ctx, c.store, "no-secrets", nil, nil)
	got := described(objs)
	for _, want := range []string{"clusterroles.rbac.authorization.k8s.io/reader", "configmaps/b in namespace other", "customresourcedefinitions.apiextensions.k8s.io/gadgets.example.com"} {
		if !slices.Contains(got, want) {
			t.Errorf("a backup of everything lacks %s: %q", want, got)
		}
	}
	if slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "nodes/") || strings.HasPrefix(s, "events/") }) {
		t.Errorf("a node or event backed up: %q", got)
	}
	for _, bad := range []Selection{{Resources: []string{"gizmos"}}, {LabelSelector: "a in ("}, {Namespaces: []string{"nowhere"}}} {
		if _, err := c.creator.Create(ctx, "bad", bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := c.creator.Create(ctx, "Bad_Name", Selection{}); err == nil || !strings.Contains(err.Error(), "backup name") {
		t.Errorf("a bad name: %v", err)
	}
}

// An object changed in the archive after the backup (the archive rewritten
// whole, so that the store's own checksum holds) fails the manifest's.
func TestBackupReadFindsATamperedObject(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testKey(t))
	if _, err := c.creator.Create(ctx, "b", Selection{Namespaces: []string{"shop"}}); err != nil {
		t.Fatal(err)
	}
	rewriteArchive(t, c.store, "b", func(path string, data []byte) []byte {
		if strings.HasSuffix(path, "/prices.json") {
			return bytes.Replace(data, []byte(`"apple":"3"`), []byte(`"apple":"9"`), 1)
		}
		return data
	})
	if _, _, err := Read(ctx, c.store, "b", nil, nil); !errors.Is(err, storage.ErrChecksum) || !strings.Contains(err.Error(), "configmaps/prices in namespace shop") {
		t.Errorf("reading a tampered archive: %v", err)
	}
}

// A resource the credentials may not list fails the backup, naming the
// way to leave it out: a backup never lacks a resource silently.
func TestBackupRefusesWhatItMayNotList(t *testing.T) {
	c := newCluster(t, testKey(t))
	fake := c.creator.Dynamic.(*dynamicfake.FakeDynamicClient)
	fake.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("RBAC"))
	})
	if _, err := c.creator.Create(context.Background(), "x", Selection{Namespaces: []string{"shop"}}); err == nil || !strings.Contains(err.Error(), "--exclude-resources secrets") {
		t.Errorf("a forbidden list: %v", err)
	}
	if listed, _ := List(context.Background(), c.store); len(listed) != 0 {
		t.Errorf("a failed backup is listed: %+v", listed)
	}
}
