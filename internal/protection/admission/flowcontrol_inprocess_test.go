package admission_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	flowcontrol "github.com/rampart-io/rampart/internal/protection/flowcontrol/admit"
)

// TestFlowControlHandlerInProcess covers the branches inside the flow
// control adapter: what it counts (a delete, an eviction when evictions
// count), what it leaves alone (exempt subjects and objects, dry runs, a
// flow control gone, a second ask about the same delete), and how a
// DryRun-mode flow control answers when its breaker trips. The counts are
// read back from the flow control's status, as `kubectl get` shows them.
func TestFlowControlHandlerInProcess(t *testing.T) {
	t.Parallel()
	podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podKind := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	pod := func(name string, labels map[string]string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "shop", "uid": "uid-" + name, "labels": labels}}
	}
	del := func(name string, labels map[string]string) review {
		return review{op: admissionv1.Delete, gvr: podsGVR, kind: podKind, namespace: "shop", name: name, old: pod(name, labels)}
	}
	evict := func(name string) review {
		return review{op: admissionv1.Create, gvr: podsGVR, kind: schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"},
			subResource: "eviction", namespace: "shop", name: name,
			obj: map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name, "namespace": "shop"}}}
	}
	// The pods evictions name, as the API server holds them (an eviction
	// carries no labels: the handler reads the pod's).
	pods := []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "shop", Labels: map[string]string{"tier": "batch"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "shop", Labels: map[string]string{"tier": "batch"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Labels: map[string]string{"tier": "web"}}},
	}
	batch := func(s *v1alpha1.DeletionFlowControlSpec) {
		s.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "batch"}}
	}
	type step struct {
		review review
		want   outcome
	}
	for _, tt := range []struct {
		name   string
		spec   func(*v1alpha1.DeletionFlowControlSpec)
		flow   string // the path's flow control; "" for none
		steps  []step
		counts int32 // deletes counted in the status at the end
	}{
		{name: "a delete is counted, the next over the limit denied with the way out", flow: "pods",
			steps: []step{
				{review: del("a", nil), want: outcome{allowed: true}},
				// The breaker trips and stays open until a person resets it
				// (Manual): a denial, not a "retry later".
				{review: del("b", nil), want: outcome{code: http.StatusForbidden, says: []string{`pod "b"`, "rampart flowcontrol reset pods"}}},
			}, counts: 1},
		{name: "with an Auto breaker the refusal says it closes by itself", flow: "pods",
			spec: func(s *v1alpha1.DeletionFlowControlSpec) { s.Breaker = v1alpha1.BreakerAuto },
			steps: []step{
				{review: del("a", nil), want: outcome{allowed: true}},
				{review: del("b", nil), want: outcome{code: http.StatusForbidden, says: []string{`pod "b"`, "until every limit has room again"}}},
			}, counts: 1},
		{name: "the API server asking twice about one delete counts it once", flow: "pods",
			steps: []step{{review: del("a", nil), want: outcome{allowed: true}}, {review: del("a", nil), want: outcome{allowed: true}}}, counts: 1},
		{name: "a dry run is decided and never counted", flow: "pods",
			steps: []step{{review: func() review { r := del("a", nil); r.dryRun = true; return r }(), want: outcome{allowed: true}}}, counts: 0},
		{name: "an exempt subject is neither counted nor denied", flow: "pods",
			spec:  func(s *v1alpha1.DeletionFlowControlSpec) { s.Exempt.Users = []string{"drainer"} },
			steps: []step{{review: func() review { r := del("a", nil); r.user = "drainer"; return r }(), want: outcome{allowed: true}}}, counts: 0},
		{name: "an exempt object is neither counted nor denied", flow: "pods",
			spec: func(s *v1alpha1.DeletionFlowControlSpec) {
				s.Exempt.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"scratch": "true"}}
			},
			steps: []step{{review: del("a", map[string]string{"scratch": "true"}), want: outcome{allowed: true}}}, counts: 0},
		{name: "an eviction counts as a delete", flow: "pods",
			steps: []step{{review: evict("a"), want: outcome{allowed: true}}, {review: del("b", nil), want: outcome{code: http.StatusForbidden}}}, counts: 1},
		{name: "each eviction counts, even of a pod by a name evicted before (a StatefulSet's pod comes back under it)", flow: "pods",
			steps: []step{{review: evict("a"), want: outcome{allowed: true}}, {review: evict("a"), want: outcome{code: http.StatusForbidden}}}, counts: 1},
		{name: "an eviction's dry run in its body is decided and never counted", flow: "pods",
			steps: []step{{review: func() review {
				r := evict("a")
				r.obj.(map[string]any)["deleteOptions"] = map[string]any{"dryRun": []string{"All"}}
				return r
			}(), want: outcome{allowed: true}}}, counts: 0},
		{name: "an eviction of a pod the objectSelector leaves out is not counted", flow: "pods", spec: batch,
			steps: []step{{review: evict("web"), want: outcome{allowed: true}}, {review: evict("a"), want: outcome{allowed: true}},
				{review: evict("b"), want: outcome{code: http.StatusForbidden}}}, counts: 1},
		{name: "an eviction of a pod that does not exist deletes nothing and is not counted", flow: "pods",
			steps: []step{{review: evict("gone"), want: outcome{allowed: true}}}, counts: 0},
		{name: "an eviction does not count when evictions are left out", flow: "pods",
			spec:  func(s *v1alpha1.DeletionFlowControlSpec) { s.CountEvictions = ptr.To(false) },
			steps: []step{{review: evict("a"), want: outcome{allowed: true}}, {review: del("b", nil), want: outcome{allowed: true}}}, counts: 1},
		{name: "DryRun mode counts, denies nothing, and warns when it would have denied", flow: "pods",
			spec: func(s *v1alpha1.DeletionFlowControlSpec) { s.Mode = v1alpha1.FlowDryRun },
			steps: []step{
				{review: del("a", nil), want: outcome{allowed: true}},
				{review: del("b", nil), want: outcome{allowed: true, says: []string{"rampart (DryRun)"}}},
			}, counts: 2},
		{name: "a flow control gone admits", flow: "gone", steps: []step{{review: del("a", nil), want: outcome{allowed: true}}}},
		{name: "not through a flow control's webhook", steps: []step{{review: del("a", nil), want: outcome{allowed: true}}}},
		{name: "an oldObject that does not decode", flow: "pods",
			steps: []step{{review: review{op: admissionv1.Delete, gvr: podsGVR, kind: podKind, namespace: "shop", name: "a", old: "not an object"},
				want: outcome{code: http.StatusBadRequest}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := v1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			if err := corev1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			dfc := &v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "pods", Generation: 1},
				Spec: v1alpha1.DeletionFlowControlSpec{
					Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}},
					Limits:    []v1alpha1.DeletionLimit{{Count: 1, Window: "1h"}}, Mode: v1alpha1.FlowEnforce, Breaker: v1alpha1.BreakerManual}}
			if tt.spec != nil {
				tt.spec(&dfc.Spec)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append([]client.Object{dfc}, pods...)...).WithStatusSubresource(dfc).Build()
			h := &flowcontrol.FlowControl{Client: c, Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))}
			ctx := context.Background()
			if tt.flow != "" {
				ctx = throughPolicy(flowcontrol.Prefix, tt.flow)
			}
			for _, s := range tt.steps {
				check(t, s.review.name, h.Handle(ctx, s.review.request(t)), s.want)
			}
			got := &v1alpha1.DeletionFlowControl{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "pods"}, got); err != nil {
				t.Fatal(err)
			}
			var counted int32
			if len(got.Status.Counts) > 0 {
				counted = got.Status.Counts[0]
			}
			if counted != tt.counts {
				t.Errorf("status counts %d deletes, want %d (%+v)", counted, tt.counts, got.Status)
			}
		})
	}
}
