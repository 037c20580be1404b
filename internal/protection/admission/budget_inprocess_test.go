package admission_test

import (
	"context"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/budget"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
)

type terminating map[string]bool

func (t terminating) NamespaceTerminating(ns string) bool { return t[ns] }

type podLabels map[string]map[string]string

func (p podLabels) PodLabels(ns, name string) (map[string]string, bool) {
	l, ok := p[ns+"/"+name]
	return l, ok
}

func podWith(f func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "uid-web-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if f != nil {
		f(p)
	}
	return p
}

// TestBudgetHandlerInProcess covers how the budget adapter classifies a
// request as a disruption of a pod (which a budget that allows none
// refuses with 429) or not (admitted unjudged), and what a dry run leaves
// behind.
func TestBudgetHandlerInProcess(t *testing.T) {
	t.Parallel()
	podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podKind := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	pod := podWith(nil)
	write := func(sub string, cur *corev1.Pod) review {
		return review{op: admissionv1.Update, gvr: podsGVR, kind: podKind, subResource: sub, namespace: "shop", name: "web-1", old: pod, obj: cur}
	}
	del := review{op: admissionv1.Delete, gvr: podsGVR, kind: podKind, namespace: "shop", name: "web-1", old: pod}
	evict := func(dry bool) review {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}}
		if dry {
			ev.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		}
		return review{op: admissionv1.Create, gvr: podsGVR, kind: schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"},
			subResource: "eviction", namespace: "shop", name: "web-1", obj: ev}
	}
	refused := outcome{code: http.StatusTooManyRequests, says: []string{"PodUnavailableBudget shop/web allows no more disruptions"}}
	admitted := outcome{allowed: true}
	for _, tt := range []struct {
		name    string
		allowed int32                          // disruptions the budget allows now
		ops     []v1alpha1.DisruptionOperation // protectOperations; nil for the default
		review  review
		ns      terminating
		want    outcome
		events  int
		// consumed says whether the budget's status records the pod after.
		consumed bool
	}{
		{name: "in-place update of an image restarts a container", review: write("", podWith(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "web:2" })),
			want: refused, events: 1},
		{name: "in-place update of an environment variable", review: write("", podWith(func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
		})), want: refused, events: 1},
		{name: "metadata-only update", review: write("", podWith(func(p *corev1.Pod) { p.Labels["release"] = "2" })), want: admitted},
		{name: "status-only update", review: write("status", podWith(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })), want: admitted},
		{name: "ephemeral containers are added without a restart", review: write("ephemeralcontainers", podWith(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
		})), want: admitted},
		{name: "a resize is not judged unless the budget asks", review: write("resize", podWith(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
		})), want: admitted},
		{name: "a resize the budget protects", ops: []v1alpha1.DisruptionOperation{v1alpha1.DisruptResize},
			review: write("resize", podWith(func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
			})),
			want: refused, events: 1},
		{name: "a resize that changes no resources", ops: []v1alpha1.DisruptionOperation{v1alpha1.DisruptResize},
			review: write("resize", podWith(nil)), want: admitted},
		{name: "an update the budget does not protect", ops: []v1alpha1.DisruptionOperation{v1alpha1.DisruptEvict},
			review: write("", podWith(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "web:2" })), want: admitted},
		{name: "delete of a running pod", review: del, want: refused, events: 1},
		{name: "delete of a pod that has terminated", review: func() review {
			r := del
			r.old = podWith(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
			return r
		}(), want: admitted},
		{name: "delete in a namespace being deleted", review: del, ns: terminating{"shop": true}, want: admitted},
		{name: "delete of a pod that is not Ready costs nothing", review: func() review {
			r := del
			r.old = podWith(func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse })
			return r
		}(), want: admitted},
		{name: "update of a pod that is not Ready costs nothing", review: func() review {
			r := write("", podWith(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "web:2" }))
			r.old = podWith(func(p *corev1.Pod) { p.Status.Conditions = nil })
			return r
		}(), want: admitted},
		{name: "delete without oldObject", review: func() review { r := del; r.old = nil; return r }(),
			want: outcome{code: http.StatusBadRequest}},
		{name: "delete admitted is recorded in the budget", allowed: 1, review: del, want: admitted, consumed: true},
		{name: "a dry-run delete is admitted and recorded nowhere", allowed: 1, review: func() review { r := del; r.dryRun = true; return r }(), want: admitted},
		{name: "a dry-run delete is refused without an Event", review: func() review { r := del; r.dryRun = true; return r }(), want: refused},
		{name: "eviction of a cached pod", review: evict(false), want: refused, events: 1},
		{name: "eviction with a dry run in its body", allowed: 1, review: evict(true), want: admitted},
	} {
		b := &v1alpha1.PodUnavailableBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Generation: 1},
			Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				MaxUnavailable: ptrTo(intstr.FromInt32(1)), ProtectOperations: tt.ops},
			Status: v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, UnavailableAllowed: tt.allowed,
				TotalReplicas: 2, CurrentAvailable: 2, DesiredAvailable: 2 - tt.allowed},
		}
		s := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(s)
		_ = v1alpha1.AddToScheme(s)
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(b).WithStatusSubresource(b).Build()
		index := budget.NewIndex()
		index.SetBudget(b)
		rec := events.NewFakeRecorder(10)
		h := &pub.Budgets{Client: c, Index: index, Namespaces: tt.ns, Recorder: rec,
			Pods: podLabels{"shop/web-1": pod.Labels}}
		check(t, tt.name, h.Handle(context.Background(), tt.review.request(t)), tt.want)
		if got := recorded(rec); len(got) != tt.events {
			t.Errorf("%s: %d Events %v, want %d", tt.name, len(got), got, tt.events)
		}
		after := &v1alpha1.PodUnavailableBudget{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), after); err != nil {
			t.Fatal(err)
		}
		if _, consumed := after.Status.Disruptions["web-1"]; consumed != tt.consumed {
			t.Errorf("%s: disruption recorded in the budget = %v, want %v", tt.name, consumed, tt.consumed)
		}
	}
}
