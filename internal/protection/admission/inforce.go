package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// InForce puts the webhooks a new protection needs in force (registered,
// and loaded by every API server) before the request that creates it is
// admitted: a protection holds from the moment the API accepts it.
type InForce interface {
	// Object puts the webhooks obj registers in force (obj is of an
	// ObjectKind a protection declared).
	Object(ctx context.Context, obj client.Object) error
	// Key puts key of the KeySet named set in force (a workload gaining
	// the explicit-replicas label, a namespace's first budget).
	Key(ctx context.Context, set, key string) error
	// Widen puts w of the widening set named set in force (a namespace
	// relabelled into a policy, by name) and keeps it for a while.
	Widen(ctx context.Context, set string, w Widening) error
}

// InForceTimeout is the timeout of webhooks that may wait on a Barrier
// (DefaultBarrierTimeout) before they answer.
const InForceTimeout = int32(15)

// Spec admits an object of a kind that registers webhooks of its own once
// they are in force, after the kind's own validation. The objects
// protection serves it for every kind (internal/protection/objects/admit),
// a ChangeWindow's for its own.
type Spec struct {
	InForce InForce
	// Kinds it judges.
	Kinds []ObjectKind
}

// Handle implements admission.Handler.
func (h Spec) Handle(ctx context.Context, req admission.Request) admission.Response {
	kinds := h.Kinds
	i := slices.IndexFunc(kinds, func(k ObjectKind) bool { return k.Resource == req.Resource.Resource })
	if i < 0 {
		return admission.Allowed("")
	}
	kind := kinds[i]
	obj := kind.New()
	if err := json.Unmarshal(req.Object.Raw, obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if kind.Validate != nil {
		if err := kind.Validate(obj); err != nil {
			return admission.Denied(fmt.Sprintf("%s %s: %v", kind.Kind, obj.GetName(), err))
		}
	}
	if h.InForce == nil || DryRun(req) || !specChanged(req) {
		return admission.Allowed("")
	}
	what := kind.Kind + " " + obj.GetName()
	if obj.GetNamespace() != "" {
		what = kind.Kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	if err := h.InForce.Object(ctx, obj); err != nil {
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

// labelInForce puts the scale subresource of a workload under the
// explicit-replicas label before a request that adds the label (a
// creation with it, or an update that sets it) is admitted.
func (h *Replicas) labelInForce(ctx context.Context, req admission.Request) *admission.Response {
	if h.InForce == nil || DryRun(req) || req.SubResource != "" {
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
	if err := h.InForce.Key(ctx, ScaleTargetKeys, target); err != nil {
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
	name, ok := NameFrom(ctx)
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
