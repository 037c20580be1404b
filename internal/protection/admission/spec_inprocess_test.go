package admission_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/protections"
)

// specCalls records what the Spec handler puts in force.
type specCalls struct {
	fuzzInForce
	calls []string
	err   error
}

func (s *specCalls) Object(_ context.Context, obj client.Object) error {
	s.calls = append(s.calls, rampartadmission.KindOf(obj)+" "+obj.GetName())
	return s.err
}

// TestSpecHandlerInProcess: a ProtectionPolicy, DeletionFlowControl or
// RecyclePolicy is admitted once its webhooks are in force; a change that
// leaves the spec (the generation) alone, and a dry run, wait for nothing;
// a slow API server gets a 503 that says to retry.
func TestSpecHandlerInProcess(t *testing.T) {
	t.Parallel()
	policiesGVR := schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "protectionpolicies"}
	flowGVR := schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "deletionflowcontrols"}
	recycleGVR := schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "recyclepolicies"}
	obj := func(kind string, generation int64) map[string]any {
		return map[string]any{"apiVersion": "rampart.io/v1alpha1", "kind": kind,
			"metadata": map[string]any{"name": "key", "generation": generation}, "spec": map[string]any{}}
	}
	create := func(gvr schema.GroupVersionResource, kind string) review {
		return review{op: admissionv1.Create, gvr: gvr, kind: schema.GroupVersionKind{Group: "rampart.io", Version: "v1alpha1", Kind: kind},
			name: "key", obj: obj(kind, 1)}
	}
	update := func(from, to int64) review {
		r := create(policiesGVR, "ProtectionPolicy")
		r.op, r.old, r.obj = admissionv1.Update, obj("ProtectionPolicy", from), obj("ProtectionPolicy", to)
		return r
	}
	for _, tt := range []struct {
		name   string
		review review
		err    error
		want   outcome
		calls  []string
	}{
		{name: "a policy created", review: create(policiesGVR, "ProtectionPolicy"), want: outcome{allowed: true}, calls: []string{"ProtectionPolicy key"}},
		{name: "a flow control created", review: create(flowGVR, "DeletionFlowControl"), want: outcome{allowed: true}, calls: []string{"DeletionFlowControl key"}},
		{name: "a recycle policy created", review: create(recycleGVR, "RecyclePolicy"), want: outcome{allowed: true}, calls: []string{"RecyclePolicy key"}},
		{name: "a spec changed", review: update(1, 2), want: outcome{allowed: true}, calls: []string{"ProtectionPolicy key"}},
		{name: "labels or status changed: nothing to wait for", review: update(2, 2), want: outcome{allowed: true}},
		{name: "a dry run", review: func() review { r := create(policiesGVR, "ProtectionPolicy"); r.dryRun = true; return r }(), want: outcome{allowed: true}},
		{name: "not in force in time", review: create(policiesGVR, "ProtectionPolicy"), err: errors.New("the API server has not loaded it"),
			want:  outcome{code: http.StatusServiceUnavailable, says: []string{"ProtectionPolicy key is not in force yet, so it was not accepted"}},
			calls: []string{"ProtectionPolicy key"}},
		{name: "malformed", review: func() review { r := create(flowGVR, "DeletionFlowControl"); r.obj = "not an object"; return r }(),
			want: outcome{code: http.StatusBadRequest}},
	} {
		calls := &specCalls{err: tt.err}
		check(t, tt.name, rampartadmission.Spec{InForce: calls, Kinds: protections.Kinds()}.Handle(context.Background(), tt.review.request(t)), tt.want)
		if len(calls.calls) != len(tt.calls) || (len(tt.calls) > 0 && calls.calls[0] != tt.calls[0]) {
			t.Errorf("%s: put in force %v, want %v", tt.name, calls.calls, tt.calls)
		}
	}
}
