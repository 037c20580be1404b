package admission_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	protectionpolicy "github.com/rampart-io/rampart/internal/protection/policy/admit"
)

// scaleView holds workloads' and namespaces' labels, as the scale targets
// view does from its informers.
type scaleView struct {
	unsynced   bool
	workloads  map[string]map[string]string // "namespace/name" → labels
	namespaces map[string]map[string]string
}

func (v scaleView) HasSynced() bool { return !v.unsynced }
func (v scaleView) ScaleReplicasPath(gr schema.GroupResource) (string, bool) {
	if gr == (schema.GroupResource{Group: "example.com", Resource: "widgets"}) {
		return ".spec.size", true
	}
	return "", false
}

func (v scaleView) WorkloadLabels(_ schema.GroupResource, ns, name string) (map[string]string, types.UID, bool) {
	l, ok := v.workloads[ns+"/"+name]
	return l, types.UID("uid-" + name), ok
}

func (v scaleView) NamespaceLabels(ns string) (map[string]string, bool) {
	l, ok := v.namespaces[ns]
	return l, ok
}

func scaleObj(replicas int64) map[string]any {
	return map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale",
		"metadata": map[string]any{"name": "web", "namespace": "shop"}, "spec": map[string]any{"replicas": replicas}}
}

func deploymentWith(replicas int64, labels, annotations map[string]string) map[string]any {
	d := deploymentObj("web", replicas, "")
	m := d["metadata"].(map[string]any)
	m["labels"], m["annotations"] = labels, annotations
	return d
}

// TestReplicasHandlerInProcess covers where the replicas adapter finds the
// rule that guards a write: the label on the object, the policy whose
// webhook it came through, or, for the scale subresource (which carries no
// labels), the view's labels and every policy that selects the workload.
func TestReplicasHandlerInProcess(t *testing.T) {
	t.Parallel()
	explicit := map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
	critical := map[string]string{"tier": "critical"}
	deployments := []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}
	ps := rampartadmission.PolicyList{
		{ObjectMeta: metav1.ObjectMeta{Name: "critical"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: deployments,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: critical},
			ExplicitReplicas:  &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardToZero},
			Exempt:            v1alpha1.Subjects{Users: []string{"autoscaler"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "named"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: deployments, Mode: v1alpha1.ModeWarn,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "fresh"}},
			ExplicitReplicas:  &v1alpha1.ExplicitReplicas{}}},
	}
	view := scaleView{
		workloads:  map[string]map[string]string{"shop/web": explicit, "prod/web": nil, "fresh/web": nil, "plain/web": nil},
		namespaces: map[string]map[string]string{"shop": nil, "prod": critical, "plain": {"tier": "batch"}},
	}
	update := func(ns string, old, cur any) review {
		return review{op: admissionv1.Update, gvr: deploymentsGVR, kind: deploymentKind, namespace: ns, name: "web", old: old, obj: cur}
	}
	scale := func(ns string, from, to int64) review {
		return review{op: admissionv1.Update, gvr: deploymentsGVR, kind: schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"},
			subResource: "scale", namespace: ns, name: "web", old: scaleObj(from), obj: scaleObj(to)}
	}
	for _, tt := range []struct {
		name       string
		ctx        context.Context
		view       *scaleView
		liveLabels map[string]string // what the API server says, nil for nothing
		liveNS     map[string]string // the namespace's labels on the API server, nil for nothing
		review     review
		want       outcome
	}{
		// The label, on the object.
		{name: "label: a change without confirmation", review: update("shop", deploymentWith(2, explicit, nil), deploymentWith(3, explicit, nil)),
			want: outcome{code: http.StatusForbidden, says: []string{"from 2 to 3", "label rampart.io/explicit-replicas"}}},
		{name: "label: confirmed in the same write", review: update("shop", deploymentWith(2, explicit, nil),
			deploymentWith(3, explicit, map[string]string{v1alpha1.AnnotationConfirmReplicas: "3"})), want: outcome{allowed: true}},
		{name: "label: removing it in the same write does not escape it", review: update("shop", deploymentWith(2, explicit, nil), deploymentWith(0, nil, nil)),
			want: outcome{code: http.StatusForbidden, says: []string{"from 2 to 0"}}},
		{name: "label: absent", review: update("shop", deploymentWith(2, nil, nil), deploymentWith(0, nil, nil)), want: outcome{allowed: true}},
		{name: "label: unchanged replicas", review: update("shop", deploymentWith(2, explicit, nil), deploymentWith(2, explicit, map[string]string{"a": "b"})),
			want: outcome{allowed: true}},
		{name: "a kind without replicas is not judged", review: review{op: admissionv1.Update, gvr: namespacesGVR, kind: namespaceKind, name: "shop",
			old: namespaceObj("shop", ""), obj: namespaceObj("shop", "")}, want: outcome{allowed: true}},
		// The policy whose webhook the write came through.
		{name: "policy: its guard, not the label's", ctx: throughPolicy(protectionpolicy.ReplicasPrefix, "critical"),
			review: update("prod", deploymentWith(2, nil, nil), deploymentWith(0, nil, nil)),
			want:   outcome{code: http.StatusForbidden, says: []string{`ProtectionPolicy "critical"`, "ToZero"}}},
		{name: "policy: a change its guard does not cover", ctx: throughPolicy(protectionpolicy.ReplicasPrefix, "critical"),
			review: update("prod", deploymentWith(2, nil, nil), deploymentWith(1, explicit, nil)), want: outcome{allowed: true}},
		{name: "policy: gone", ctx: throughPolicy(protectionpolicy.ReplicasPrefix, "gone"),
			review: update("prod", deploymentWith(2, explicit, nil), deploymentWith(0, explicit, nil)), want: outcome{allowed: true}},
		// The scale subresource: labels and namespace labels from the view.
		{name: "scale: labelled in the view", review: scale("shop", 2, 3),
			want: outcome{code: http.StatusForbidden, says: []string{"scale subresource", "kubectl rampart scale"}}},
		{name: "scale: a policy selecting the namespace", review: scale("prod", 2, 0),
			want: outcome{code: http.StatusForbidden, says: []string{`ProtectionPolicy "critical"`}}},
		{name: "scale: the policy exempts the requester", review: func() review { r := scale("prod", 2, 0); r.user = "autoscaler"; return r }(),
			want: outcome{allowed: true}},
		{name: "scale: a namespace the view has not seen is matched by its name label", review: scale("fresh", 2, 3),
			want: outcome{allowed: true, says: []string{"Warn mode", `ProtectionPolicy "named"`}}},
		{name: "scale: not in the view, labelled on the API server", review: scale("new", 2, 3), liveLabels: explicit,
			want: outcome{code: http.StatusForbidden, says: []string{"from 2 to 3"}}},
		{name: "scale: not in the view, nor on the API server", review: scale("new", 2, 3), want: outcome{allowed: true}},
		{name: "scale: no rule in the view nor on the API server", review: scale("plain", 2, 0), want: outcome{allowed: true}},
		{name: "scale: the view lags a label just added", review: scale("plain", 2, 3), liveLabels: explicit,
			want: outcome{code: http.StatusForbidden, says: []string{"label rampart.io/explicit-replicas"}}},
		{name: "scale: the view lags a namespace just relabelled into a policy", review: scale("plain", 2, 0), liveNS: critical,
			want: outcome{code: http.StatusForbidden, says: []string{`ProtectionPolicy "critical"`}}},
		{name: "scale: while the view loads", review: scale("new", 2, 3), view: &scaleView{unsynced: true},
			want: outcome{code: http.StatusServiceUnavailable, says: []string{"still loading"}}},
	} {
		v := view
		if tt.view != nil {
			v = *tt.view
		}
		h := &rampartadmission.Replicas{View: v, Policies: ps, Recorder: events.NewFakeRecorder(10),
			LiveLabels: func(_ context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error) {
				if gvr == namespacesGVR && ns == "" {
					return tt.liveNS, tt.liveNS != nil, nil
				}
				if gvr != deploymentsGVR || name != "web" {
					return nil, false, errors.New("asked about the wrong workload")
				}
				return tt.liveLabels, tt.liveLabels != nil, nil
			}}
		ctx := tt.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		check(t, tt.name, h.Handle(ctx, tt.review.request(t)), tt.want)
	}
}

// inForceCalls records the policies put in force.
type inForceCalls struct {
	fuzzInForce
	policies []string
	err      error
}

func (f *inForceCalls) Widen(_ context.Context, set string, w rampartadmission.Widening) error {
	if set != rampartadmission.RelabelledWidening {
		return fmt.Errorf("widening set %q, want %q", set, rampartadmission.RelabelledWidening)
	}
	f.policies = append(f.policies, w.Object.GetName()+" in "+w.Key)
	return f.err
}

// TestNamespaceRelabelIntoAPolicyWaitsForItsWebhooks: a label change that
// brings a namespace under a policy (reaching the policy's namespaces
// webhook) is admitted only once the policy's webhooks reach that
// namespace by name.
func TestNamespaceRelabelIntoAPolicyWaitsForItsWebhooks(t *testing.T) {
	t.Parallel()
	critical := map[string]string{"tier": "critical"}
	deployments := []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}
	ps := rampartadmission.PolicyList{
		{ObjectMeta: metav1.ObjectMeta{Name: "critical"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: deployments,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: critical},
			ExplicitReplicas:  &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardToZero}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deletes-only"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: deployments,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: critical}, Protection: v1alpha1.ProtectionAlways}},
	}
	ns := func(labels map[string]string) *corev1.Namespace {
		n := namespaceObj("shop", "")
		n.Labels = labels
		return n
	}
	relabel := func(old, cur map[string]string) review {
		return review{op: admissionv1.Update, gvr: namespacesGVR, kind: namespaceKind, name: "shop", old: ns(old), obj: ns(cur)}
	}
	for _, tt := range []struct {
		name   string
		policy string
		review review
		err    error
		want   outcome
		calls  int
	}{
		{name: "brought under the policy", policy: "critical", review: relabel(map[string]string{"tier": "batch"}, critical),
			want: outcome{allowed: true}, calls: 1},
		{name: "already under it", policy: "critical", review: relabel(critical, map[string]string{"tier": "critical", "x": "y"}),
			want: outcome{allowed: true}},
		{name: "taken out of it", policy: "critical", review: relabel(critical, nil), want: outcome{allowed: true}},
		{name: "a dry run registers nothing", policy: "critical",
			review: func() review { r := relabel(nil, critical); r.dryRun = true; return r }(), want: outcome{allowed: true}},
		{name: "a policy that protects from deletion", policy: "deletes-only", review: relabel(nil, critical), want: outcome{allowed: true}, calls: 1},
		{name: "a policy gone", policy: "gone", review: relabel(nil, critical), want: outcome{allowed: true}},
		{name: "not in force in time: refused, retry", policy: "critical", review: relabel(nil, critical), err: errors.New("API server slow"),
			want: outcome{code: http.StatusServiceUnavailable, says: []string{"namespace shop", `ProtectionPolicy critical`, "not in force yet"}}, calls: 1},
	} {
		calls := &inForceCalls{err: tt.err}
		h := &rampartadmission.Replicas{View: scaleView{}, Policies: ps, Recorder: events.NewFakeRecorder(10), InForce: calls}
		check(t, tt.name, h.Handle(throughPolicy(protectionpolicy.ReplicasPrefix, tt.policy), tt.review.request(t)), tt.want)
		if len(calls.policies) != tt.calls {
			t.Errorf("%s: put in force %v, want %d calls", tt.name, calls.policies, tt.calls)
		}
	}
}
