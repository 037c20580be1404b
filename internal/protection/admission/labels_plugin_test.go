package admission

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
)

// With the label rules compiled, the label webhook leaves to the compiled
// policies only the custom resources' writes it would admit: confirmed
// replica changes of an object that carried the label. Its match
// conditions are evaluated here with the API server's own CEL libraries
// (as a policy's, which they share): every other write still calls it.
func TestLabelWebhookLeavesOnlyConfirmedCustomResourceWrites(t *testing.T) {
	reg := Registration{Protections: builtin(), CompiledLabels: true, OwnNamespace: "rampart-system", Scaled: []compiled.ScaledResource{compiledtest.Widgets}}
	var upd *admissionregistrationv1.ValidatingWebhook
	for _, w := range (&LabelsPlugin{}).Webhooks(reg, newBuilder(reg)) {
		if w.Name == "replicas.rampart.io" {
			upd = &w.ValidatingWebhook
		}
	}
	if upd == nil {
		t.Fatal("no replicas.rampart.io webhook")
	}
	// A policy that denies whenever the webhook's conditions would call it.
	calls := compiled.LabelRules(compiled.Options{})[:1]
	calls[0].Policy = calls[0].Policy.DeepCopy()
	calls[0].Policy.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{}
	calls[0].Policy.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	calls[0].Policy.Spec.MatchConditions = upd.MatchConditions
	calls[0].Policy.Spec.Variables = nil
	calls[0].Policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false", Message: "calls the webhook", Reason: ptr.To(metav1.StatusReasonForbidden)}}
	explicit := map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tt := range []struct {
		name            string
		gr              schema.GroupResource
		oldLabels       map[string]string
		from, to        any
		confirm         string
		callsTheWebhook bool
	}{
		{"a confirmed change of a labelled custom resource", compiledtest.Widgets.Resource, explicit, int64(3), int64(0), "0", false},
		{"an unconfirmed change", compiledtest.Widgets.Resource, explicit, int64(3), int64(0), "", true},
		{"a confirmation of another count", compiledtest.Widgets.Resource, explicit, int64(3), int64(0), "3", true},
		{"a confirmed change of an object gaining the label (its scale subresource is put in force)", compiledtest.Widgets.Resource, nil, int64(3), int64(0), "0", true},
		{"no size after the write reads as 1", compiledtest.Widgets.Resource, explicit, int64(3), nil, "1", false},
		{"a confirmed change of a built-in workload (compiled, never called)", deployments, explicit, int64(3), int64(0), "0", false},
		{"a built-in workload gaining the label", deployments, nil, int64(3), int64(0), "0", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := compiledtest.For(t, admission.Update, tt.gr, "lab", "w", "alice")
			var ann map[string]string
			if tt.confirm != "" {
				ann = map[string]string{v1alpha1.AnnotationConfirmReplicas: tt.confirm}
			}
			path := compiledtest.ReplicasPath(tt.gr)
			req.Old = compiledtest.ObjectAt(req.GVK, path, "lab", "w", tt.oldLabels, tt.from, nil)
			req.Obj = compiledtest.ObjectAt(req.GVK, path, "lab", "w", explicit, tt.to, ann)
			got := compiledtest.InNamespace(t, "lab").Admit(t, calls, req.Attributes())
			if got.Denied != tt.callsTheWebhook {
				t.Errorf("calls the webhook: %v, want %v", got.Denied, tt.callsTheWebhook)
			}
		})
	}
}
