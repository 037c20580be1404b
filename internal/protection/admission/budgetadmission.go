package admission

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// ObjectsPath admits Rampart's own objects: ChangeWindows (WindowSpec) and
// PodUnavailableBudgets (BudgetAdmission), by resource.
const ObjectsPath = "/validate/objects"

// Objects dispatches admission of Rampart's own objects by resource.
type Objects map[string]admission.Handler

// Handle implements admission.Handler.
func (o Objects) Handle(ctx context.Context, req admission.Request) admission.Response {
	if h, ok := o[req.Resource.Resource]; ok {
		return h.Handle(ctx, req)
	}
	return admission.Allowed("")
}

// BudgetAdmission admits a new PodUnavailableBudget only once every
// disruption of a pod in its namespace reaches the budget webhooks on every
// API server, so that the budget holds from the moment the API server
// stores it.
type BudgetAdmission struct {
	InForce InForce
}

// Handle implements admission.Handler.
func (h *BudgetAdmission) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Namespace == "" || DryRun(req) {
		return admission.Allowed("") // a dry run registers nothing
	}
	if err := h.InForce.Key(ctx, BudgetNamespaceKeys, req.Namespace); err != nil {
		return NotLoadedStatus("PodUnavailableBudget "+req.Namespace+"/"+req.Name, err)
	}
	return admission.Allowed("")
}
