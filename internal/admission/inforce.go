package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/changewindow"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// InForce puts the webhooks a new protection needs in force (registered,
// and loaded by every API server) before the request that creates it is
// admitted: a protection holds from the moment the API accepts it.
type InForce interface {
	ScaleTarget(ctx context.Context, target string) error
	Policy(ctx context.Context, p *v1alpha1.ProtectionPolicy) error
	// Relabelled puts p's webhooks in force for namespace ns by name.
	Relabelled(ctx context.Context, p *v1alpha1.ProtectionPolicy, ns string) error
	Window(ctx context.Context, w *v1alpha1.ChangeWindow) error
	FlowControl(ctx context.Context, f *v1alpha1.DeletionFlowControl) error
	RecyclePolicy(ctx context.Context, p *v1alpha1.RecyclePolicy) error
}

// inForceTimeout is the timeout of webhooks that may wait on a Barrier
// (DefaultBarrierTimeout) before they answer.
const inForceTimeout = int32(15)

// SpecPath judges the creation and change of ProtectionPolicies,
// DeletionFlowControls and RecyclePolicies: admitted once their webhooks
// are in force.
const SpecPath = "/validate/spec"

// specWebhook reaches CREATE and UPDATE of the cluster-scoped kinds whose
// webhooks Rampart registers. Failing closed means: with Rampart down, no
// policy or flow control can be created or changed (it could not be
// enforced either).
func specWebhook(webhook func(string, string, ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.ValidatingWebhook {
	h := webhook("spec.rampart.io", SpecPath, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"protectionpolicies", "deletionflowcontrols", "recyclepolicies"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
	})
	h.TimeoutSeconds = ptr.To(inForceTimeout)
	return h
}

// Spec is the handler of SpecPath.
type Spec struct{ InForce InForce }

// Handle implements admission.Handler.
func (h Spec) Handle(ctx context.Context, req admission.Request) admission.Response {
	if h.InForce == nil || dryRun(req) || !specChanged(req) {
		return admission.Allowed("")
	}
	var err error
	var what string
	switch req.Resource.Resource {
	case "protectionpolicies":
		p := &v1alpha1.ProtectionPolicy{}
		if err := json.Unmarshal(req.Object.Raw, p); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		what, err = "ProtectionPolicy "+p.Name, h.InForce.Policy(ctx, p)
	case "deletionflowcontrols":
		f := &v1alpha1.DeletionFlowControl{}
		if err := json.Unmarshal(req.Object.Raw, f); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		what, err = "DeletionFlowControl "+f.Name, h.InForce.FlowControl(ctx, f)
	case "recyclepolicies":
		p := &v1alpha1.RecyclePolicy{}
		if err := json.Unmarshal(req.Object.Raw, p); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		what, err = "RecyclePolicy "+p.Name, h.InForce.RecyclePolicy(ctx, p)
	default:
		return admission.Allowed("")
	}
	if err != nil {
		return NotLoadedStatus(what, err)
	}
	return admission.Allowed("")
}

// specChanged is true for a creation and for an update that changed the
// spec (the generation, which the API server bumps before admission).
func specChanged(req admission.Request) bool {
	if req.Operation == admissionv1.Create {
		return true
	}
	if req.Operation != admissionv1.Update {
		return false
	}
	var old, cur unstructured.Unstructured
	if old.UnmarshalJSON(req.OldObject.Raw) != nil || cur.UnmarshalJSON(req.Object.Raw) != nil {
		return true
	}
	return old.GetGeneration() != cur.GetGeneration()
}

// windowInForce validates a ChangeWindow and puts its webhook in force.
func windowInForce(ctx context.Context, inForce InForce, req admission.Request) admission.Response {
	cw := &v1alpha1.ChangeWindow{}
	if err := json.Unmarshal(req.Object.Raw, cw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if _, err := changewindow.Compile(cw.Spec, time.Now()); err != nil {
		return admission.Denied(fmt.Sprintf("ChangeWindow %s: %v", cw.Name, err))
	}
	if inForce == nil || dryRun(req) || !specChanged(req) {
		return admission.Allowed("")
	}
	if err := inForce.Window(ctx, cw); err != nil {
		return NotLoadedStatus("ChangeWindow "+cw.Namespace+"/"+cw.Name, err)
	}
	return admission.Allowed("")
}

// labelInForce puts the scale subresource of a workload under the
// explicit-replicas label before a request that adds the label (a
// creation with it, or an update that sets it) is admitted.
func (h *Replicas) labelInForce(ctx context.Context, req admission.Request) *admission.Response {
	if h.InForce == nil || dryRun(req) || req.SubResource != "" {
		return nil
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	if _, _, ok := replicasPath(h.View, gr); !ok {
		return nil
	}
	var old, cur unstructured.Unstructured
	if len(req.OldObject.Raw) > 0 {
		if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
			r := admission.Errored(http.StatusBadRequest, err)
			return &r
		}
	}
	if err := cur.UnmarshalJSON(req.Object.Raw); err != nil {
		r := admission.Errored(http.StatusBadRequest, err)
		return &r
	}
	if !h.gainsGuard(ctx, gr, &old, &cur) {
		return nil
	}
	target := gr.Group + "/" + gr.Resource + "/" + req.Namespace + "/" + cur.GetName()
	if err := h.InForce.ScaleTarget(ctx, target); err != nil {
		r := NotLoadedStatus(fmt.Sprintf("label %s=true on %s %s/%s", v1alpha1.LabelExplicitReplicas, gr.String(), req.Namespace, cur.GetName()), err)
		return &r
	}
	return nil
}

// gainsGuard says whether a write brings a workload under a rule guarding
// its replicas: the label added, or (through a policy's webhook) the
// workload created under the policy or relabelled into its selector.
func (h *Replicas) gainsGuard(ctx context.Context, gr schema.GroupResource, old, cur *unstructured.Unstructured) bool {
	if labelGuard(cur.GetLabels()) != "" && labelGuard(old.GetLabels()) == "" {
		return true
	}
	name, ok := policyName(ctx)
	if !ok || h.Policies == nil {
		return false
	}
	pol, found, err := h.Policies.Policy(ctx, name)
	if err != nil || !found || policy.Guard(pol) == "" {
		// A lookup that fails registers the target anyway: erring towards
		// guarding.
		return err != nil
	}
	return policy.Covers(pol, gr, nil, cur.GetLabels()) && (old.Object == nil || !policy.Covers(pol, gr, nil, old.GetLabels()))
}
