package admission_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	protectionpolicy "github.com/rampart-io/rampart/internal/protection/policy/admit"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// deletionView answers the deletion engine's probes from fixed counts.
type deletionView struct {
	unsynced bool
	livePods map[string]int // by namespace
	podsOf   map[types.UID]int
}

func sample(n int, what string) deletion.Sample {
	if n == 0 {
		return deletion.Sample{}
	}
	return deletion.Sample{Count: n, Examples: []string{what}}
}

func (v deletionView) LivePods(ns string) deletion.Sample      { return sample(v.livePods[ns], "pod/web-1") }
func (v deletionView) BoundClaims(string) deletion.Sample      { return deletion.Sample{} }
func (v deletionView) ScaledWorkloads(string) deletion.Sample  { return deletion.Sample{} }
func (v deletionView) ProtectedObjects(string) deletion.Sample { return deletion.Sample{} }
func (v deletionView) CustomResources(string) deletion.Sample  { return deletion.Sample{} }
func (v deletionView) Dependents(types.UID) deletion.Sample    { return deletion.Sample{} }
func (v deletionView) LivePodsOf(uid types.UID) deletion.Sample {
	return sample(v.podsOf[uid], "pod/web-1")
}
func (v deletionView) HasSynced() bool { return !v.unsynced }
func (v deletionView) ScaleReplicasPath(schema.GroupResource) (string, bool) {
	return "", false
}

var (
	namespacesGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	namespaceKind  = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	deploymentKind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
)

func labelled(level v1alpha1.ProtectionLevel) map[string]string {
	if level == "" {
		return nil
	}
	return map[string]string{v1alpha1.LabelProtection: string(level)}
}

func namespaceObj(name string, level v1alpha1.ProtectionLevel) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labelled(level)}}
}

func deploymentObj(name string, replicas int64, level v1alpha1.ProtectionLevel) map[string]any {
	return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": "shop", "uid": "uid-" + name, "labels": labelled(level)},
		"spec":     map[string]any{"replicas": replicas}}
}

// TestDeletionHandlerInProcess covers the branches of the deletion
// adapter: how it reads the request, which source sets the level, and
// what it answers while the view loads.
func TestDeletionHandlerInProcess(t *testing.T) {
	t.Parallel()
	view := deletionView{livePods: map[string]int{"shop": 2}, podsOf: map[types.UID]int{"uid-web": 2}}
	cascadingNS := review{op: admissionv1.Delete, gvr: namespacesGVR, kind: namespaceKind, name: "shop", old: namespaceObj("shop", v1alpha1.ProtectionCascading)}
	keep := rampartadmission.PolicyList{
		{ObjectMeta: metav1.ObjectMeta{Name: "keep"}, Spec: v1alpha1.ProtectionPolicySpec{Protection: v1alpha1.ProtectionAlways,
			Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}}},
			Exempt:    v1alpha1.Subjects{Users: []string{"ops-bot"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "warn"}, Spec: v1alpha1.ProtectionPolicySpec{Protection: v1alpha1.ProtectionAlways, Mode: v1alpha1.ModeWarn,
			Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}}}}},
	}
	with := func(r review, f func(*review)) review { f(&r); return r }
	for _, tt := range []struct {
		name   string
		ctx    context.Context
		view   deletionView
		review review
		want   outcome
		events int
	}{
		{name: "an UPDATE is not this webhook's", review: with(cascadingNS, func(r *review) { r.op = admissionv1.Update; r.obj = r.old }),
			want: outcome{allowed: true}},
		{name: "a DELETE without oldObject is a bad request", review: with(cascadingNS, func(r *review) { r.old = nil }),
			want: outcome{code: http.StatusBadRequest, says: []string{"no oldObject"}}},
		{name: "an unlabelled namespace goes", review: with(cascadingNS, func(r *review) { r.old = namespaceObj("shop", "") }),
			want: outcome{allowed: true}},
		{name: "Cascading with live pods is denied, with an Event", review: cascadingNS, events: 1,
			want: outcome{code: http.StatusForbidden, says: []string{`namespace "shop"`, "pod/web-1"}}},
		{name: "Cascading, empty namespace", review: with(cascadingNS, func(r *review) { r.old = namespaceObj("empty", v1alpha1.ProtectionCascading); r.name = "empty" }),
			want: outcome{allowed: true}},
		{name: "a dry run is judged the same, without an Event", review: with(cascadingNS, func(r *review) { r.dryRun = true }),
			want: outcome{code: http.StatusForbidden, says: []string{`namespace "shop"`}}},
		{name: "Cascading while the view loads fails closed", review: cascadingNS, view: deletionView{unsynced: true},
			want: outcome{code: http.StatusServiceUnavailable, says: []string{"still loading"}}},
		{name: "Always needs no view", review: with(cascadingNS, func(r *review) { r.old = namespaceObj("shop", v1alpha1.ProtectionAlways) }),
			view: deletionView{unsynced: true}, events: 1, want: outcome{code: http.StatusForbidden, says: []string{"forbids deleting it"}}},
		{name: "a workload scaled up is Cascading's", review: review{op: admissionv1.Delete, gvr: deploymentsGVR, kind: deploymentKind, namespace: "shop", name: "web",
			old: deploymentObj("web", 2, v1alpha1.ProtectionCascading)}, events: 1,
			want: outcome{code: http.StatusForbidden, says: []string{`deployments.apps "web"`, "replicas 0"}}},
		{name: "an orphaning delete of a scaled workload keeps its pods", review: review{op: admissionv1.Delete, gvr: deploymentsGVR, kind: deploymentKind, namespace: "shop", name: "web",
			old: deploymentObj("web", 2, v1alpha1.ProtectionCascading), options: metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}},
			want: outcome{allowed: true}},
		{name: "through a policy: its level, not the label's", ctx: throughPolicy(protectionpolicy.DeletionPrefix, "keep"),
			review: with(cascadingNS, func(r *review) { r.old = namespaceObj("empty", "") }), events: 1,
			want: outcome{code: http.StatusForbidden, says: []string{`ProtectionPolicy "keep"`}}},
		{name: "through a policy that exempts the requester", ctx: throughPolicy(protectionpolicy.DeletionPrefix, "keep"),
			review: with(cascadingNS, func(r *review) { r.user = "ops-bot" }), want: outcome{allowed: true}},
		{name: "through a policy that is gone", ctx: throughPolicy(protectionpolicy.DeletionPrefix, "gone"),
			review: cascadingNS, want: outcome{allowed: true}},
		{name: "through a Warn-mode policy: admitted with the denial as a warning", ctx: throughPolicy(protectionpolicy.DeletionPrefix, "warn"),
			review: with(cascadingNS, func(r *review) { r.old = namespaceObj("empty", "") }),
			want:   outcome{allowed: true, says: []string{"Warn mode", `ProtectionPolicy "warn"`}}},
	} {
		v := view
		if tt.view.unsynced {
			v.unsynced = true
		}
		rec := events.NewFakeRecorder(10)
		h := &rampartadmission.Deletion{View: v, Policies: keep, Recorder: rec}
		ctx := tt.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		check(t, tt.name, h.Handle(ctx, tt.review.request(t)), tt.want)
		if got := recorded(rec); len(got) != tt.events {
			t.Errorf("%s: %d Events %v, want %d", tt.name, len(got), got, tt.events)
		}
	}
}

// TestDeletionDenialNamesCoreResourcesAsDiscoveryDoes: kubectl accepts
// "endpoints/x", not "endpoint/x".
func TestDeletionDenialNamesCoreResourcesAsDiscoveryDoes(t *testing.T) {
	t.Parallel()
	mapper := restmapper.NewDiscoveryRESTMapper([]*restmapper.APIGroupResources{{
		Group: metav1.APIGroup{Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}},
			PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "v1", Version: "v1"}},
		VersionedResources: map[string][]metav1.APIResource{"v1": {{Name: "endpoints", SingularName: "endpoints", Namespaced: true, Kind: "Endpoints"}}},
	}})
	h := &rampartadmission.Deletion{View: deletionView{}, Mapper: mapper}
	ep := &corev1.Endpoints{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Endpoints"},
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", Labels: labelled(v1alpha1.ProtectionAlways)}}
	r := review{op: admissionv1.Delete, gvr: schema.GroupVersionResource{Version: "v1", Resource: "endpoints"},
		kind: schema.GroupVersionKind{Version: "v1", Kind: "Endpoints"}, namespace: "shop", name: "db", old: ep}
	check(t, "endpoints", h.Handle(context.Background(), r.request(t)), outcome{code: http.StatusForbidden,
		says: []string{`endpoints "db"`, "kubectl label -n shop endpoints/db rampart.io/protection-"}})
}

// deadlineBin fails every capture, recording how long it was given.
type deadlineBin struct{ within chan time.Duration }

func (b deadlineBin) Capture(ctx context.Context, _ recyclebin.Entry) (string, error) {
	d, ok := ctx.Deadline()
	if !ok {
		b.within <- -1
	} else {
		b.within <- time.Until(d)
	}
	return "", fmt.Errorf("%w: connection refused", recyclebin.ErrStore)
}

// TestDeletionCaptureAnswersBeforeTheWebhookTimesOut: a store that does
// not answer gets the refusal that says why before the API server gives up
// on the webhook (5 s): the capture is given less.
func TestDeletionCaptureAnswersBeforeTheWebhookTimesOut(t *testing.T) {
	t.Parallel()
	bin := deadlineBin{within: make(chan time.Duration, 1)}
	h := &rampartadmission.Deletion{View: deletionView{}, Bin: bin}
	r := review{op: admissionv1.Delete, gvr: namespacesGVR, kind: namespaceKind, name: "empty", old: namespaceObj("empty", v1alpha1.ProtectionCascading)}
	check(t, "store down", h.Handle(context.Background(), r.request(t)),
		outcome{code: http.StatusServiceUnavailable, says: []string{"could not be stored", "connection refused"}})
	if d := <-bin.within; d <= 0 || d >= 5*time.Second {
		t.Errorf("the capture was given %v; want a deadline below the webhook's 5 s timeout", d)
	}
}
