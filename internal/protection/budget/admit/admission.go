package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// BudgetAdmission admits a new PodUnavailableBudget only once every
// disruption of a pod in its namespace reaches the budget webhooks on every
// API server, so that the budget holds from the moment the API server
// stores it; and it marks each creation and change of a budget's spec
// (Marks) before the API server stores it, so that every replica judging a
// disruption knows whether it has seen it.
type BudgetAdmission struct {
	InForce rampartadmission.InForce
	// Index names the fence and the marks, which guard nothing and are
	// admitted at once (nil: none).
	Index *budget.Index
	// Marks records the change (nil, or marking off: no marks).
	Marks *Marks
}

// Handle implements admission.Handler.
func (h *BudgetAdmission) Handle(ctx context.Context, req admission.Request) admission.Response {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) || req.Namespace == "" || rampartadmission.DryRun(req) {
		return admission.Allowed("") // a dry run registers nothing
	}
	if h.Index != nil && h.Index.IsOwn(req.Namespace, req.Name) {
		return admission.Allowed("")
	}
	what := "PodUnavailableBudget " + req.Namespace + "/" + req.Name
	if req.Operation == admissionv1.Create {
		if err := h.InForce.Key(ctx, NamespaceKeys, req.Namespace); err != nil {
			return rampartadmission.NotLoadedStatus(what, err)
		}
	}
	if h.Marks == nil || h.Index == nil || !h.Index.Marking() {
		return admission.Allowed("")
	}
	// The API server has set the UID and the new generation by now
	// (validating admission runs after its strategy).
	var now, old metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &now); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if now.Generation == old.Generation {
			return admission.Allowed("") // the spec is the same: nothing to mark
		}
	}
	if err := h.Marks.Record(ctx, req.Namespace, req.Name, string(now.UID), now.Generation); err != nil {
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("%s is not stored: %w; retry", what, err))
	}
	return admission.Allowed("")
}
