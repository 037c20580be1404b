package admit

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// BudgetAdmission admits a new PodUnavailableBudget only once every
// disruption of a pod in its namespace reaches the budget webhooks on every
// API server, so that the budget holds from the moment the API server
// stores it.
type BudgetAdmission struct {
	InForce rampartadmission.InForce
	// Index names the fence, which guards nothing and is admitted at
	// once (nil: no fence).
	Index *budget.Index
}

// Handle implements admission.Handler.
func (h *BudgetAdmission) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Namespace == "" || rampartadmission.DryRun(req) {
		return admission.Allowed("") // a dry run registers nothing
	}
	if h.Index != nil && h.Index.IsFence(req.Namespace, req.Name) {
		return admission.Allowed("")
	}
	if err := h.InForce.Key(ctx, NamespaceKeys, req.Namespace); err != nil {
		return rampartadmission.NotLoadedStatus("PodUnavailableBudget "+req.Namespace+"/"+req.Name, err)
	}
	return admission.Allowed("")
}
