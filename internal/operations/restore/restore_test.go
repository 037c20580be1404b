package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// fakeCluster is the API server for the restore's decisions: which
// objects are live, and what is created (a UID each).
type fakeCluster struct {
	live    map[string]types.UID // "resource/namespace/name", and "Kind/namespace/name" for owners
	objects map[types.UID]*unstructured.Unstructured
	created []*unstructured.Unstructured
	updated []*unstructured.Unstructured
	dryRuns int
	// createdMeanwhile names objects someone else creates between the
	// restore's look and its create.
	createdMeanwhile map[string]bool
	// refuse names objects the API server refuses to create.
	refuse map[string]bool
}

func (f *fakeCluster) Live(_ context.Context, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, bool, error) {
	uid, ok := f.live[gvr.Resource+"/"+ns+"/"+name]
	if !ok {
		return nil, false, nil
	}
	if obj, ok := f.objects[uid]; ok {
		return obj.DeepCopy(), true, nil
	}
	u := &unstructured.Unstructured{}
	u.SetName(name)
	u.SetNamespace(ns)
	u.SetUID(uid)
	return u, true, nil
}

func (f *fakeCluster) Update(_ context.Context, _ schema.GroupVersionResource, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	if dryRun {
		f.dryRuns++
		return obj, nil
	}
	f.updated = append(f.updated, obj.DeepCopy())
	return obj, nil
}

func (f *fakeCluster) Owner(_ context.Context, ref metav1.OwnerReference, ns string) (types.UID, bool, error) {
	uid, ok := f.live[ref.Kind+"/"+ns+"/"+ref.Name]
	return uid, ok, nil
}

func (f *fakeCluster) Create(_ context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	if f.refuse[obj.GetName()] {
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: obj.GetKind()}, obj.GetName(), nil)
	}
	if f.createdMeanwhile[obj.GetName()] {
		return nil, apierrors.NewAlreadyExists(gvr.GroupResource(), obj.GetName())
	}
	if dryRun {
		f.dryRuns++
		return obj, nil
	}
	obj = obj.DeepCopy()
	obj.SetUID(types.UID(fmt.Sprintf("new-%d", len(f.created)+1)))
	f.created = append(f.created, obj)
	f.live[gvr.Resource+"/"+obj.GetNamespace()+"/"+obj.GetName()] = obj.GetUID()
	f.live[obj.GetKind()+"/"+obj.GetNamespace()+"/"+obj.GetName()] = obj.GetUID()
	return obj, nil
}

func kept(gvr schema.GroupVersionResource, kind, ns, name, uid string, owners ...metav1.OwnerReference) Item {
	meta := map[string]any{"name": name, "uid": uid, "resourceVersion": "42", "creationTimestamp": "2026-11-20T10:00:00Z",
		"managedFields": []any{map[string]any{"manager": "kubectl"}}, "labels": map[string]any{"app": "web"}}
	if ns != "" {
		meta["namespace"] = ns
	}
	if len(owners) > 0 {
		var refs []any
		for _, o := range owners {
			refs = append(refs, map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind, "name": o.Name, "uid": string(o.UID), "controller": true})
		}
		meta["ownerReferences"] = refs
	}
	obj := map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind, "metadata": meta, "status": map[string]any{"phase": "Running"}}
	if kind == "Pod" {
		obj["spec"] = map[string]any{"nodeName": "node-3", "containers": []any{map[string]any{"name": "app", "image": "app:1"}}}
	}
	raw, _ := json.Marshal(obj)
	return Item{Resource: gvr, Namespace: ns, Name: name, UID: types.UID(uid), Object: raw}
}

func ref(kind, name, uid string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid)}
}

var (
	namespaces  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	replicaSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	pods        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secrets     = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// A namespace deleted with its contents comes back namespace first, then
// each owner before what it owns, every ownerReference pointing at the
// restored owner's new UID (or the garbage collector would delete the
// restored objects again), and nothing the API server sets carried over.
func TestRestoreOrdersAndRelinksOwners(t *testing.T) {
	entries := []Item{ // in the order a bin lists them: no help
		kept(pods, "Pod", "shop", "web-1", "old-pod", ref("ReplicaSet", "web-7d", "old-rs")),
		kept(replicaSets, "ReplicaSet", "shop", "web-7d", "old-rs", ref("Deployment", "web", "old-deploy")),
		kept(configMaps, "ConfigMap", "shop", "prices", "old-cm"),
		kept(deployments, "Deployment", "shop", "web", "old-deploy"),
		kept(namespaces, "Namespace", "", "shop", "old-ns"),
	}
	plan, err := PlanRestore(entries, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range plan.Steps {
		order = append(order, s.Object.GetName())
	}
	if got := strings.Join(order, " "); got != "shop prices web web-7d web-1" {
		t.Fatalf("restore order %q, want the namespace, then owners before what they own", got)
	}
	c := &fakeCluster{live: map[string]types.UID{}}
	outcomes, err := plan.Run(context.Background(), c, false)
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, o := range outcomes {
		if o.Action != Create || o.UID == "" {
			t.Fatalf("%s not created: %+v", o.Step.Item.Described(), o)
		}
		uids[o.Step.Object.GetName()] = o.UID
	}
	for _, obj := range c.created {
		if obj.GetResourceVersion() != "" || !obj.GetCreationTimestamp().Time.IsZero() || obj.GetManagedFields() != nil {
			t.Errorf("%s created with server-set fields: %v", obj.GetName(), obj.Object["metadata"])
		}
		if _, ok := obj.Object["status"]; ok {
			t.Errorf("%s created with its old status", obj.GetName())
		}
		if obj.GetLabels()["app"] != "web" {
			t.Errorf("%s lost its labels", obj.GetName())
		}
		switch obj.GetName() {
		case "web-7d":
			if refs := obj.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != uids["web"] {
				t.Errorf("the ReplicaSet's owner: %+v, want the restored Deployment's uid %s", refs, uids["web"])
			}
		case "web-1":
			if refs := obj.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != uids["web-7d"] {
				t.Errorf("the Pod's owner: %+v, want the restored ReplicaSet's uid %s", refs, uids["web-7d"])
			}
			if n, _, _ := unstructured.NestedString(obj.Object, "spec", "nodeName"); n != "" {
				t.Errorf("the Pod is bound to its old node %s", n)
			}
		}
	}
}

// A live object of the same name is never overwritten; what it owned
// points at it. An owner that is gone and not restored is dropped from the
// references; a live owner recreated since (another UID) is pointed at.
func TestRestoreNeverOverwritesAndDropsDanglingOwners(t *testing.T) {
	entries := []Item{
		kept(deployments, "Deployment", "shop", "web", "old-deploy"),
		kept(replicaSets, "ReplicaSet", "shop", "web-7d", "old-rs", ref("Deployment", "web", "old-deploy")),
		kept(replicaSets, "ReplicaSet", "shop", "api-5c", "old-api-rs", ref("Deployment", "api", "old-api")),
		kept(replicaSets, "ReplicaSet", "shop", "db-9f", "old-db-rs", ref("Deployment", "db", "old-db")),
	}
	plan, err := PlanRestore(entries, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{
		"deployments/shop/web": "live-web", "Deployment/shop/web": "live-web", // recreated by hand since
		"Deployment/shop/db": "old-db", // never deleted
	}}
	outcomes, err := plan.Run(context.Background(), c, false)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Outcome{}
	for _, o := range outcomes {
		byName[o.Step.Object.GetName()] = o
	}
	if o := byName["web"]; o.Action == Create || !strings.Contains(o.Reason, "exists (uid live-web): not overwritten") || !strings.Contains(o.Reason, "--overwrite") {
		t.Errorf("the live Deployment: %+v, want it left alone", o)
	}
	owner := func(name string) []metav1.OwnerReference {
		for _, obj := range c.created {
			if obj.GetName() == name {
				return obj.GetOwnerReferences()
			}
		}
		t.Fatalf("%s not created", name)
		return nil
	}
	if refs := owner("web-7d"); len(refs) != 1 || refs[0].UID != "live-web" {
		t.Errorf("web-7d's owner %+v, want the live Deployment", refs)
	}
	if refs := owner("api-5c"); len(refs) != 0 || !strings.Contains(strings.Join(byName["api-5c"].Notes, ";"), "gone and not restored: reference dropped") {
		t.Errorf("api-5c's owners %+v (notes %q), want the dangling reference dropped", refs, byName["api-5c"].Notes)
	}
	if refs := owner("db-9f"); len(refs) != 1 || refs[0].UID != "old-db" || len(byName["db-9f"].Notes) != 0 {
		t.Errorf("db-9f's owner %+v, want the live owner kept as it was", refs)
	}
}

// A namespace's contents in a dry run: the namespace does not exist, so
// the API server is not asked about them, and the outcome says so.
func TestRestoreDryRunOfANamespace(t *testing.T) {
	plan, err := PlanRestore([]Item{
		kept(configMaps, "ConfigMap", "shop", "prices", "old-cm"),
		kept(namespaces, "Namespace", "", "shop", "old-ns"),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{}}
	outcomes, err := plan.Run(context.Background(), c, true)
	if err != nil || c.dryRuns != 1 || len(outcomes) != 2 || outcomes[1].Action != Create ||
		!strings.Contains(strings.Join(outcomes[1].Notes, ";"), "not validated by the API server") {
		t.Fatalf("dry run of a namespace: %d dry runs, %+v, %v", c.dryRuns, outcomes, err)
	}
}

// A dry run creates nothing for real but asks the API server to validate
// every object (server-side dry run), owners standing in by their old UID.
func TestRestoreDryRunCreatesNothing(t *testing.T) {
	plan, err := PlanRestore([]Item{
		kept(deployments, "Deployment", "shop", "web", "old-deploy"),
		kept(replicaSets, "ReplicaSet", "shop", "web-7d", "old-rs", ref("Deployment", "web", "old-deploy")),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{}}
	outcomes, err := plan.Run(context.Background(), c, true)
	if err != nil || len(c.created) != 0 || c.dryRuns != 2 || outcomes[1].Action != Create {
		t.Fatalf("dry run: created %d, dry runs %d, outcomes %+v, %v", len(c.created), c.dryRuns, outcomes, err)
	}
}

func TestPlanRefusals(t *testing.T) {
	cm := kept(configMaps, "ConfigMap", "shop", "prices", "old-cm")
	if _, err := PlanRestore([]Item{cm, cm}, Options{}); err == nil || !strings.Contains(err.Error(), "two copies") {
		t.Errorf("two copies of one object: %v", err)
	}
	if _, err := PlanRestore([]Item{cm, kept(configMaps, "ConfigMap", "shop", "other", "o")}, Options{AsNewName: "x"}); err == nil {
		t.Error("a new name for two objects was planned")
	}
	p, err := PlanRestore([]Item{cm}, Options{AsNewName: "prices-restored"})
	if err != nil || p.Steps[0].Object.GetName() != "prices-restored" {
		t.Errorf("as a new name: %v", err)
	}
	a := kept(replicaSets, "ReplicaSet", "shop", "a", "uid-a", ref("ReplicaSet", "b", "uid-b"))
	b := kept(replicaSets, "ReplicaSet", "shop", "b", "uid-b", ref("ReplicaSet", "a", "uid-a"))
	if _, err := PlanRestore([]Item{a, b}, Options{}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("an ownership cycle: %v", err)
	}
	sealed := Item{Resource: secrets, Namespace: "shop", Name: "db"}
	if _, err := PlanRestore([]Item{sealed}, Options{}); err == nil || !strings.Contains(err.Error(), "holds no object") {
		t.Errorf("a sealed copy: %v", err)
	}
}

// A Service gets a new cluster IP (the old one may be taken), unless it is
// headless.
func TestRestoredServicesGetNewClusterIPs(t *testing.T) {
	services := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	svc := func(name, ip string) Item {
		e := kept(services, "Service", "shop", name, "uid-"+name)
		var m map[string]any
		_ = json.Unmarshal(e.Object, &m)
		m["spec"] = map[string]any{"clusterIP": ip, "clusterIPs": []any{ip}, "ports": []any{map[string]any{"port": int64(80)}}}
		e.Object, _ = json.Marshal(m)
		return e
	}
	p, err := PlanRestore([]Item{svc("web", "10.96.0.17"), svc("db", "None")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{}}
	if _, err := p.Run(context.Background(), c, false); err != nil || len(c.created) != 2 {
		t.Fatalf("created %d: %v", len(c.created), err)
	}
	for _, obj := range c.created {
		ip, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterIP")
		if want := map[string]string{"web": "", "db": "None"}[obj.GetName()]; ip != want {
			t.Errorf("%s: clusterIP %q, want %q", obj.GetName(), ip, want)
		}
		if _, _, err := unstructured.NestedSlice(obj.Object, "spec", "ports"); err != nil {
			t.Errorf("%s: ports lost: %v", obj.GetName(), err)
		}
	}
}

// A live object of the same name is left alone, with the diff to the
// copy; with Overwrite it is updated to the copy (its UID and
// resourceVersion kept), and a dry run updates nothing.
func TestRestoreShowsTheDiffAndOverwritesOnlyWhenTold(t *testing.T) {
	e := kept(deployments, "Deployment", "shop", "web", "old-web")
	live := &unstructured.Unstructured{}
	if err := live.UnmarshalJSON(e.Object); err != nil {
		t.Fatal(err)
	}
	live.SetUID("live-web")
	live.SetResourceVersion("99")
	live.SetLabels(map[string]string{"app": "web", "tier": "hand-made"})
	newCluster := func() *fakeCluster {
		return &fakeCluster{live: map[string]types.UID{"deployments/shop/web": "live-web", "Deployment/shop/web": "live-web"},
			objects: map[types.UID]*unstructured.Unstructured{"live-web": live}}
	}
	for _, tt := range []struct {
		name             string
		overwrite, dry   bool
		replaced, update bool
	}{
		{name: "left alone", overwrite: false},
		{name: "overwrite, dry run", overwrite: true, dry: true, replaced: true},
		{name: "overwrite", overwrite: true, replaced: true, update: true},
	} {
		plan, err := PlanRestore([]Item{e}, Options{Overwrite: tt.overwrite})
		if err != nil {
			t.Fatal(err)
		}
		c := newCluster()
		out, err := plan.Run(context.Background(), c, tt.dry)
		if err != nil || len(out) != 1 {
			t.Fatalf("%s: %+v, %v", tt.name, out, err)
		}
		o := out[0]
		if !strings.Contains(o.Diff, "-    tier: hand-made") || !strings.Contains(o.Diff, "--- live") || strings.Contains(o.Diff, "resourceVersion") {
			t.Errorf("%s: diff\n%s\nwant the live label removed, without server-set fields", tt.name, o.Diff)
		}
		if (o.Action == Update) != tt.replaced || (o.Reason != "") == tt.replaced || len(c.created) != 0 {
			t.Errorf("%s: %+v (created %d), want replaced %v", tt.name, o, len(c.created), tt.replaced)
		}
		if got := len(c.updated); got != map[bool]int{true: 1}[tt.update] {
			t.Fatalf("%s: %d updates", tt.name, got)
		}
		if tt.update && (c.updated[0].GetUID() != "live-web" || c.updated[0].GetResourceVersion() != "99" || c.updated[0].GetLabels()["tier"] != "") {
			t.Errorf("%s: update %+v, want the copy with the live UID and resourceVersion", tt.name, c.updated[0].Object["metadata"])
		}
	}
}

// An object created by someone else between the restore's look and its
// create is left alone like any live one, and the rest goes on.
func TestRestoreLeavesAloneWhatAppearsMeanwhile(t *testing.T) {
	plan, err := PlanRestore([]Item{kept(configMaps, "ConfigMap", "shop", "kube-root-ca.crt", "old-ca"), kept(configMaps, "ConfigMap", "shop", "prices", "old-prices")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{}, createdMeanwhile: map[string]bool{"kube-root-ca.crt": true}}
	out, err := plan.Run(context.Background(), c, false)
	if err != nil || len(out) != 2 {
		t.Fatalf("%+v, %v", out, err)
	}
	for _, o := range out {
		switch o.Step.Object.GetName() {
		case "kube-root-ca.crt":
			if o.Action == Create || !strings.Contains(o.Reason, "created meanwhile") {
				t.Errorf("the object made meanwhile: %+v", o)
			}
		case "prices":
			if o.Action != Create {
				t.Errorf("prices not restored: %+v", o)
			}
		}
	}
}

// The plan a dry run shows, object by object: a live object as the copy
// has it is unchanged, one that differs is skipped with the fields that
// differ, one being deleted is a conflict, and so is one the API server
// refuses, with what it would have owned.
func TestRestorePlanActions(t *testing.T) {
	same := kept(configMaps, "ConfigMap", "shop", "same", "old-same")
	changed := kept(configMaps, "ConfigMap", "shop", "changed", "old-changed")
	dying := kept(configMaps, "ConfigMap", "shop", "dying", "old-dying")
	live := func(it Item, edit func(*unstructured.Unstructured)) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(it.Object); err != nil {
			t.Fatal(err)
		}
		u.SetUID("live-" + types.UID(it.Name))
		u.SetResourceVersion("77")
		edit(u)
		return u
	}
	c := &fakeCluster{
		live: map[string]types.UID{"configmaps/shop/same": "live-same", "configmaps/shop/changed": "live-changed", "configmaps/shop/dying": "live-dying"},
		objects: map[types.UID]*unstructured.Unstructured{
			"live-same":    live(same, func(*unstructured.Unstructured) {}),
			"live-changed": live(changed, func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"app": "shop", "tier": "x"}) }),
			"live-dying":   live(dying, func(u *unstructured.Unstructured) { now := metav1.Now(); u.SetDeletionTimestamp(&now) }),
		},
		refuse: map[string]bool{"web": true},
	}
	plan, err := PlanRestore([]Item{same, changed, dying,
		kept(deployments, "Deployment", "shop", "web", "old-deploy"),
		kept(replicaSets, "ReplicaSet", "shop", "web-7d", "old-rs", ref("Deployment", "web", "old-deploy")),
		kept(configMaps, "ConfigMap", "shop", "new", "old-new"),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := plan.Run(context.Background(), c, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Outcome{}
	for _, o := range out {
		got[o.Step.Object.GetName()] = o
	}
	for name, want := range map[string]Action{"same": Unchanged, "changed": Skipped, "dying": Conflict, "web": Conflict, "web-7d": Conflict, "new": Create} {
		if got[name].Action != want {
			t.Errorf("%s: %s (%s), want %s", name, got[name].Action, got[name].Reason, want)
		}
	}
	if n := Conflicts(out); n != 3 {
		t.Errorf("%d conflicts, want 3", n)
	}
	var fields []string
	for _, f := range got["changed"].Fields {
		fields = append(fields, f.String())
	}
	if strings.Join(fields, "; ") != `.metadata.labels.app: "shop" -> "web"; .metadata.labels.tier: "x" -> (absent)` {
		t.Errorf("field diff of the changed ConfigMap: %q", fields)
	}
	if len(got["same"].Fields) != 0 || got["same"].Diff != "" {
		t.Errorf("an unchanged object with a diff: %+v", got["same"])
	}
	if !strings.Contains(got["web-7d"].Reason, "its owner Deployment/web is not restored") {
		t.Errorf("the dependent of a refused owner: %q", got["web-7d"].Reason)
	}
	if !strings.Contains(got["dying"].Reason, "being deleted") {
		t.Errorf("an object being deleted: %q", got["dying"].Reason)
	}
}

// listingCluster also lists, and counts the GETs it is asked for.
type listingCluster struct {
	*fakeCluster
	gets, lists int
}

func (l *listingCluster) Live(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, bool, error) {
	l.gets++
	return l.fakeCluster.Live(ctx, gvr, ns, name)
}

func (l *listingCluster) List(ctx context.Context, gvr schema.GroupVersionResource, ns string) ([]unstructured.Unstructured, error) {
	l.lists++
	var out []unstructured.Unstructured
	for key := range l.live {
		if r, rest, _ := strings.Cut(key, "/"); r == gvr.Resource {
			if n, name, _ := strings.Cut(rest, "/"); n == ns {
				u, _, _ := l.fakeCluster.Live(ctx, gvr, ns, name)
				out = append(out, *u)
			}
		}
	}
	return out, nil
}

// Many objects of one resource in a namespace are read with one list, not
// a GET each; a lone object is read with a GET; the plan is the same.
func TestRestoreListsWhatItRestoresMany(t *testing.T) {
	var items []Item
	for i := range 50 {
		items = append(items, kept(configMaps, "ConfigMap", "shop", fmt.Sprintf("cm-%02d", i), fmt.Sprintf("old-%d", i)))
	}
	items = append(items, kept(deployments, "Deployment", "shop", "web", "old-web"))
	plan, err := PlanRestore(items, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &listingCluster{fakeCluster: &fakeCluster{live: map[string]types.UID{"configmaps/shop/cm-07": "live-7"}}}
	out, err := plan.Run(context.Background(), c, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.lists != 1 || c.gets != 1 {
		t.Errorf("%d lists and %d GETs, want one list (the ConfigMaps) and one GET (the Deployment)", c.lists, c.gets)
	}
	for _, o := range out {
		want := Create
		if o.Step.Object.GetName() == "cm-07" {
			want = Skipped
		}
		if o.Action != want {
			t.Errorf("%s: %s, want %s", o.Step.Described(), o.Action, want)
		}
	}
}

// A Secret that differs from its copy is shown by key, its values hidden.
func TestRestoreHidesSecretValues(t *testing.T) {
	it := kept(secrets, "Secret", "shop", "db", "old-db")
	var m map[string]any
	_ = json.Unmarshal(it.Object, &m)
	m["data"] = map[string]any{"password": "c2VjcmV0LWtlcHQ="}
	it.Object, _ = json.Marshal(m)
	live := &unstructured.Unstructured{}
	_ = live.UnmarshalJSON(it.Object)
	live.SetUID("live-db")
	_ = unstructured.SetNestedField(live.Object, "c2VjcmV0LWxpdmU=", "data", "password")
	plan, err := PlanRestore([]Item{it}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{"secrets/shop/db": "live-db"}, objects: map[types.UID]*unstructured.Unstructured{"live-db": live}}
	out, err := plan.Run(context.Background(), c, true)
	if err != nil || len(out) != 1 || out[0].Action != Skipped || len(out[0].Fields) != 1 || out[0].Fields[0].Path != ".data.password" {
		t.Fatalf("%+v, %v", out, err)
	}
	shown := out[0].Diff + out[0].Fields[0].String()
	if strings.Contains(shown, "c2VjcmV0") || !strings.Contains(shown, "(hidden, sha256 ") {
		t.Errorf("a Secret's diff shows its values:\n%s", shown)
	}
}

// A pod or Job that had finished when it was kept is not created again:
// it would run again (a migration, a CronJob's past run). Running ones
// are restored; --run-finished restores the finished ones too.
func TestFinishedPodsAndJobsAreNotRunAgain(t *testing.T) {
	jobs := schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	withStatus := func(e Item, status map[string]any) Item {
		var m map[string]any
		_ = json.Unmarshal(e.Object, &m)
		m["status"] = status
		e.Object, _ = json.Marshal(m)
		return e
	}
	complete := map[string]any{"conditions": []any{map[string]any{"type": "Complete", "status": "True"}}, "succeeded": int64(1)}
	items := func() []Item {
		return []Item{
			withStatus(kept(jobs, "Job", "shop", "migrate", "old-migrate"), complete),
			withStatus(kept(pods, "Pod", "shop", "migrate-x", "old-mx", ref("Job", "migrate", "old-migrate")), map[string]any{"phase": "Succeeded"}),
			withStatus(kept(jobs, "Job", "shop", "failed", "old-failed"), map[string]any{"conditions": []any{map[string]any{"type": "Failed", "status": "True"}}}),
			withStatus(kept(jobs, "Job", "shop", "running", "old-running"), map[string]any{"active": int64(1), "conditions": []any{map[string]any{"type": "Complete", "status": "False"}}}),
			kept(pods, "Pod", "shop", "web-1", "old-web"),
		}
	}
	plan, err := PlanRestore(items(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{live: map[string]types.UID{}}
	outcomes, err := plan.Run(context.Background(), c, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Action{}
	for _, o := range outcomes {
		got[o.Step.Object.GetName()] = o.Action
		if o.Action == SkippedFinished && !strings.Contains(o.Reason, "--run-finished") {
			t.Errorf("%s: reason %q does not name the way to restore it anyway", o.Step.Described(), o.Reason)
		}
	}
	want := map[string]Action{"migrate": SkippedFinished, "migrate-x": SkippedFinished, "failed": SkippedFinished, "running": Create, "web-1": Create}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	if len(c.created) != 2 {
		t.Errorf("created %d objects, want the running Job and pod only", len(c.created))
	}

	plan, err = PlanRestore(items(), Options{RunFinished: true})
	if err != nil {
		t.Fatal(err)
	}
	c = &fakeCluster{live: map[string]types.UID{}}
	if outcomes, err = plan.Run(context.Background(), c, false); err != nil || len(c.created) != 5 {
		t.Fatalf("with RunFinished: created %d of 5: %v", len(c.created), err)
	}
}
