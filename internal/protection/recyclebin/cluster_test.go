package recyclebin_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// On a real API server with its garbage collector running: ConfigMaps
// owned by another are kept, all three deleted, and restored. The child of
// a restored owner is pointed at the owner's new UID, the child of an
// owner not restored loses the reference, and the garbage collector
// deletes neither afterwards; a restore that kept the old references (what
// kube-recycle-bin does) loses its child to the garbage collector.
func TestRestoredDependentsSurviveTheGarbageCollector(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := clustertest.Start(t, localcluster.Options{Unprotected: true})
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	create := func(name string, owner *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": name}}
		if owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
		}
		got, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	parent := create("parent", nil)
	child := create("child", parent)
	orphanParent := create("orphan-parent", nil)
	orphan := create("orphan", orphanParent)
	naive := create("naive", parent)

	// What the recycle bin keeps: the objects as the API server served them.
	keep := func(cm *corev1.ConfigMap) recyclebin.Entry {
		cm = cm.DeepCopy()
		cm.APIVersion, cm.Kind = "v1", "ConfigMap"
		raw, err := json.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		return recyclebin.Entry{Resource: configMaps, Kind: "ConfigMap", Namespace: ns, Name: cm.Name, UID: cm.UID,
			DeletedAt: time.Now(), How: recyclebin.HowAPI, State: recyclebin.StateDeleted, Object: raw}
	}
	entries := []recyclebin.Entry{keep(child), keep(orphan), keep(parent)} // not the orphan's parent
	for _, name := range []string{"parent", "child", "orphan-parent", "orphan", "naive"} {
		// The garbage collector may be first to a dependent.
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}

	for _, name := range []string{"child", "orphan"} {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := cms.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("%s was never deleted", name)
		}
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	plan, err := recyclebin.PlanRestore(entries, restore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A dry run asks the API server and creates nothing.
	if _, err := plan.Run(ctx, restore.APICluster{Dynamic: env.Dynamic, Mapper: mapper}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "parent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a dry run, parent: %v; want nothing created", err)
	}
	outcomes, err := plan.Run(ctx, restore.APICluster{Dynamic: env.Dynamic, Mapper: mapper}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outcomes {
		if o.Action != restore.Create {
			t.Fatalf("%s not restored: %+v", o.Step.Described(), o)
		}
	}
	// The naive restore: the kept object as it was, old owner UID and all
	// (server-set fields aside, which the API server refuses).
	n := naive.DeepCopy()
	n.ResourceVersion, n.UID, n.CreationTimestamp, n.ManagedFields = "", "", metav1.Time{}, nil
	if _, err := cms.Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The garbage collector deletes a dependent whose owner's UID is
	// gone within moments: wait for it to take the naive copy, then look
	// at the rest.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "naive", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the garbage collector never deleted the naive restore's child: the test shows nothing")
	}
	restoredParent, err := cms.Get(ctx, "parent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gotChild, err := cms.Get(ctx, "child", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the restored child was deleted: %v", err)
	}
	if refs := gotChild.OwnerReferences; len(refs) != 1 || refs[0].UID != restoredParent.UID || refs[0].UID == parent.UID {
		t.Errorf("the child's owner: %+v, want the restored parent's new uid %s", refs, restoredParent.UID)
	}
	gotOrphan, err := cms.Get(ctx, "orphan", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the restored orphan was deleted: %v", err)
	}
	if len(gotOrphan.OwnerReferences) != 0 || gotOrphan.Data["v"] != "orphan" {
		t.Errorf("the orphan: owners %+v, data %v; want no owner and its data", gotOrphan.OwnerReferences, gotOrphan.Data)
	}
}
