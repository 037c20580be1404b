package clusterview

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/deletion"
)

// newTestView are views whose caches are filled by hand: the informers are
// never started, so this tests the indexes and answers, not the watches
// (internal/protection/admission tests those against a real API server).
func newTestView(t testing.TB) *Views {
	t.Helper()
	return newTestViewOf(t, nil)
}

// newTestViewOf are test views with a dynamic client.
func newTestViewOf(t testing.TB, dyn dynamic.Interface) *Views {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	v, err := newViews(fake.NewClientset(), metadatafake.NewSimpleMetadataClient(scheme), dyn, apiextensionsfake.NewClientset(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func add(t testing.TB, v *Views, objs ...any) {
	t.Helper()
	for _, o := range objs {
		var gr schema.GroupResource
		switch o.(type) {
		case *corev1.Pod:
			gr = pods
		case *corev1.PersistentVolumeClaim:
			gr = claims
		case *appsv1.Deployment:
			gr = deployments
		case *appsv1.ReplicaSet:
			gr = replicaSets
		case *appsv1.StatefulSet:
			gr = statefulSets
		case *batchv1.Job:
			gr = jobs
		case *corev1.ConfigMap:
			gr = configMaps
		default:
			t.Fatalf("unexpected %T", o)
		}
		inf := v.informer(gr)
		// What a started informer does: transform, store, then notify.
		if _, err := slim(o); err != nil {
			t.Fatal(err)
		}
		if err := inf.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
		for _, h := range v.handlers {
			if h.informer == inf {
				h.handler.OnAdd(o, false)
			}
		}
	}
}

func owner(uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "X", Name: "x", UID: uid}}
}

func pod(ns, name string, phase corev1.PodPhase, owners []metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), OwnerReferences: owners},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func TestViewAnswers(t *testing.T) {
	v := newTestView(t)
	now := metav1.Now()
	add(t, v,
		pod("shop", "web-1", corev1.PodRunning, owner("rs-web")),
		pod("shop", "web-2", corev1.PodPending, owner("rs-web")),
		pod("shop", "done", corev1.PodSucceeded, owner("rs-web")),
		pod("shop", "failed", corev1.PodFailed, nil),
		pod("other", "x", corev1.PodRunning, nil),
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "bound"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pending"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "deploy-web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "idle"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0)}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abc", UID: "rs-web", OwnerReferences: owner("deploy-web")}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "child", OwnerReferences: owner("parent")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "leaving", OwnerReferences: owner("parent"), DeletionTimestamp: &now}},
	)
	check := func(name string, got deletion.Sample, want int) {
		t.Helper()
		if got.Count != want {
			t.Errorf("%s = %d %v, want %d", name, got.Count, got.Examples, want)
		}
	}
	check("LivePods(shop): running and pending, not succeeded or failed", v.Deletion.LivePods("shop"), 2)
	check("BoundClaims(shop)", v.Deletion.BoundClaims("shop"), 1)
	check("ScaledWorkloads(shop): the deployment and its ReplicaSet, not the idle one", v.Deletion.ScaledWorkloads("shop"), 2)
	check("LivePodsOf(deployment) through its ReplicaSet", v.Deletion.LivePodsOf("deploy-web"), 2)
	check("Dependents(parent): not the one already being deleted", v.Deletion.Dependents("parent"), 1)
	check("LivePods(empty)", v.Deletion.LivePods("empty"), 0)
	if ex := v.Deletion.Dependents("parent").Examples; len(ex) != 1 || ex[0] != "shop/configmap/child" {
		t.Errorf("Dependents examples = %v", ex)
	}
	if p, _, _ := v.informer(pods).GetIndexer().GetByKey("shop/web-1"); p.(*corev1.Pod).Spec.Containers != nil {
		t.Error("cached pods keep their spec: the transform is not applied")
	}
}

// BenchmarkDecideCascadingNamespace judges the DELETE of a Cascading
// namespace holding 10,000 pods (and 10,000 more elsewhere): the decision
// reads indexes, never a list of the cluster.
func BenchmarkDecideCascadingNamespace(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			v := newTestView(b)
			for i := range n {
				add(b, v, pod("big", fmt.Sprintf("p%d", i), corev1.PodRunning, owner("rs")),
					pod("other", fmt.Sprintf("p%d", i), corev1.PodRunning, owner("rs2")))
			}
			r := deletion.Request{Object: protection.Object{Resource: schema.GroupResource{Resource: "namespaces"}, Name: "big"}, Level: v1alpha1.ProtectionCascading}
			b.ResetTimer()
			for b.Loop() {
				if deletion.Decide(r, v.Deletion).Allowed {
					b.Fatal("allowed")
				}
			}
		})
	}
}

// BenchmarkDecideCascadingWorkload judges a Deployment whose ReplicaSet
// owns 1,000 pods, in a namespace of 10,000.
func BenchmarkDecideCascadingWorkload(b *testing.B) {
	v := newTestView(b)
	add(b, v, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: "rs", UID: "rs", OwnerReferences: owner("deploy")}})
	for i := range 10_000 {
		o := owner("elsewhere")
		if i < 1000 {
			o = owner("rs")
		}
		add(b, v, pod("big", fmt.Sprintf("p%d", i), corev1.PodRunning, o))
	}
	r := deletion.Request{Object: protection.Object{Resource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespace: "big", Name: "web"},
		UID: "deploy", Level: v1alpha1.ProtectionCascading, Workload: true, Replicas: ptr.To[int64](0)}
	for b.Loop() {
		if deletion.Decide(r, v.Deletion).Allowed {
			b.Fatal("allowed")
		}
	}
}
