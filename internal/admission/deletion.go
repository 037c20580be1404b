// Package admission adapts Rampart's decisions to Kubernetes admission
// webhooks: it builds each decision's request view from an AdmissionReview,
// reports denials (response, Event, metric), and registers the webhook
// configurations with the API server.
package admission

import (
	"context"
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/internal/protection/deletion"
)

// DeletionPath is where the deletion-protection webhook is served.
const DeletionPath = "/validate/deletion"

// Deletion judges DELETE requests with internal/protection/deletion.
type Deletion struct {
	// Recorder writes an Event on each denied object; nil writes none.
	Recorder events.EventRecorder
}

var _ admission.Handler = (*Deletion)(nil)

// Handle implements admission.Handler.
func (h *Deletion) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	// A DELETE carries the object being deleted as oldObject; its metadata
	// is all the decision needs.
	var old metav1.PartialObjectMetadata
	if len(req.OldObject.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errNoOldObject)
	}
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	namespace := req.Namespace
	if gr == namespacesResource {
		// The API server sets a Namespace's own name as the request's
		// namespace; the object itself is cluster-scoped.
		namespace = ""
	}
	v := deletion.Decide(deletion.Request{
		Resource:  gr,
		Namespace: namespace,
		Name:      req.Name,
		Labels:    old.Labels,
	})
	if v.Allowed {
		return admission.Allowed("")
	}
	denials.WithLabelValues(v.Rule, gr.String()).Inc()
	// A dry run has no side effects, and an Event is one.
	if h.Recorder != nil && !dryRun(req) {
		ref := &corev1.ObjectReference{
			APIVersion: req.Kind.Group + "/" + req.Kind.Version,
			Kind:       req.Kind.Kind,
			Namespace:  namespace,
			Name:       req.Name,
			UID:        old.UID,
		}
		if req.Kind.Group == "" {
			ref.APIVersion = req.Kind.Version
		}
		h.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "DeleteDenied", "Delete",
			"%s denied DELETE by %s: %s", v.Rule, req.UserInfo.Username, v.Message)
	}
	return admission.Denied(v.Message)
}

var namespacesResource = schema.GroupResource{Resource: "namespaces"}

func dryRun(req admission.Request) bool { return req.DryRun != nil && *req.DryRun }

type adminError string

func (e adminError) Error() string { return string(e) }

const errNoOldObject = adminError("DELETE admission request carries no oldObject")
