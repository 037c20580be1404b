package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

// TestPodDeletesLeaveADeletionTimestamp is what the node guard relies on
// to tell a pod deleted on purpose from one the API's store lost (the
// orphan cleanup after etcd data loss or a restore): every DELETE of a
// pod through the API server, --grace-period=0 --force included, writes a
// deletionTimestamp before it removes the pod, so a pod informer sees it
// before the DELETE event and in it. A pod removed from etcd directly
// leaves without one. It lives here, in a package whose cluster has a
// real API server and no kubelet, because it is about what the API server
// does with a DELETE; a dry run and a DELETE Rampart denies change nothing.
func TestPodDeletesLeaveADeletionTimestamp(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := "guarded-" + ns // no such node: the pods only need to be bound

	guardPods := nodeguard.NewNodePods(env.Client, node, nodeguard.DefaultStaleAfter)
	go guardPods.Run(ctx)
	// What a pod informer sees, in order.
	var mu sync.Mutex
	var seen []string
	note := func(what string, obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		p := obj.(*corev1.Pod)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s %s deletionTimestamp=%t", what, p.Name, p.DeletionTimestamp != nil))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { note("update", obj) },
		DeleteFunc: func(obj any) { note("delete", obj) },
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, guardPods.Synced) {
		t.Fatal("informers did not sync")
	}

	pods := env.Client.CoreV1().Pods(ns)
	create := func(name string, labels map[string]string) *corev1.Pod {
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	explicit := map[string]string{v1alpha1.LabelExplicitDeletion: "true"}
	forced := create("forced", explicit)
	lost := create("lost", explicit)
	denied := create("denied", map[string]string{v1alpha1.LabelExplicitDeletion: "true", protectionLabel: "Always"})
	force := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}

	if err := pods.Delete(ctx, "forced", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run delete: %v", err)
	}
	// kubectl delete pod --grace-period=0 --force.
	if err := pods.Delete(ctx, "forced", force); err != nil {
		t.Fatalf("force delete: %v", err)
	}
	err := pods.Delete(ctx, "denied", force)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "rampart.io/protection") {
		t.Fatalf("delete of a pod labelled rampart.io/protection=Always: %v, want the deletion protection's denial", err)
	}
	// Gone from the store with no API request at all.
	etcd, err := source.Client{Endpoints: []string{env.EtcdURL()}, CACert: env.PKIFile("etcd-ca.crt"),
		Cert: env.PKIFile("etcd-client.crt"), Key: env.PKIFile("etcd-client.key")}.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if r, err := etcd.Delete(ctx, "/registry/pods/"+ns+"/lost"); err != nil || r.Deleted != 1 {
		t.Fatalf("removing pod lost from etcd: %+v, %v", r, err)
	}

	eventually(t, "the informers to see two pods go", func(context.Context) (bool, error) {
		mu.Lock()
		n := strings.Count(strings.Join(seen, "\n"), "delete ")
		mu.Unlock()
		return n == 2 && guardPods.Vanished(forced.UID) != nil && guardPods.Vanished(lost.UID) != nil, nil
	})
	mu.Lock()
	events := strings.Join(seen, "\n")
	mu.Unlock()
	want := "update forced deletionTimestamp=true\ndelete forced deletionTimestamp=true\ndelete lost deletionTimestamp=false"
	if events != want {
		t.Errorf("a pod informer saw:\n%s\nwant (the dry run and the denied delete change nothing):\n%s", events, want)
	}

	// What the guard decides for the kubelet's kill of each.
	for _, c := range []struct {
		pod    *corev1.Pod
		reason string
	}{
		{forced, nodeguard.ReasonDeletionAsked},
		{lost, nodeguard.ReasonVanished},
		{denied, nodeguard.ReasonNotAskedToEnd},
	} {
		uid := c.pod.UID
		v := nodeguard.View{Pod: nodeguard.PodRef{UID: uid, Namespace: ns, Name: c.pod.Name}, Running: true, SandboxReady: true, RegularRunning: true,
			APIReachable: true, APIPod: guardPods.Pod(uid), LastSeen: guardPods.Vanished(uid)}
		if got := nodeguard.Decide(nodeguard.StopPodSandbox, v, time.Now()); got.Reason != c.reason {
			t.Errorf("the guard's verdict on pod %s: %s (%s), want %s", c.pod.Name, got.Reason, got.Message, c.reason)
		}
	}
}
