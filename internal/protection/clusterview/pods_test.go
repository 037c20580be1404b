package clusterview

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The pod cache drops containers (slim), yet the quota peaks still see
// each pod's requests; deleted pods, seen or missed, are forgotten.
func TestPodSummariesOutliveSlim(t *testing.T) {
	s := newPodSummaries()
	c := &Informers{podUse: s}
	tf := s.transform(slim)
	pod := func(name, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: k8stypes.UID("uid-" + uid)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}}}
	}
	a, _ := tf(pod("a", "1"))
	b, _ := tf(pod("b", "2"))
	if len(a.(*corev1.Pod).Spec.Containers) != 0 {
		t.Fatal("slim kept the containers")
	}
	got := c.PodsByNamespace()["shop"]
	if len(got) != 2 || got[0].Containers[0].Request[0] != 250 {
		t.Fatalf("summaries %+v, want two pods of 250m", got)
	}
	h := s.handler().(cache.ResourceEventHandlerFuncs)
	h.DeleteFunc(a)
	h.DeleteFunc(cache.DeletedFinalStateUnknown{Key: "shop/b", Obj: b})
	if n := len(c.PodsByNamespace()["shop"]); n != 0 {
		t.Errorf("%d summaries after both pods were deleted", n)
	}
}
