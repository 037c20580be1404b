package admission

import (
	"context"
	"errors"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/replicas"
)

// ReplicasPath is where the explicit-replicas webhook is served, for
// writes of workloads and of their scale subresource.
const ReplicasPath = "/validate/replicas"

// Replicas judges writes that change spec.replicas with
// internal/protection/replicas.
type Replicas struct {
	View ClusterView
	// Exempt are requesters the label rule never denies (e.g. the
	// horizontal-pod-autoscaler's service account); policies carry their own.
	Exempt   v1alpha1.Subjects
	Recorder events.EventRecorder
}

var _ admission.Handler = (*Replicas)(nil)

// Handle implements admission.Handler.
func (h *Replicas) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	var old, cur unstructured.Unstructured
	if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := cur.UnmarshalJSON(req.Object.Raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	r := replicas.Request{Object: protection.Object{Resource: gr, Namespace: req.Namespace, Name: req.Name}}
	var uid types.UID
	kind := schema.GroupVersionKind(req.Kind)
	switch req.SubResource {
	case "scale":
		// A Scale carries no labels: the workload's come from the view.
		labels, u, ok := h.View.WorkloadLabels(gr, req.Namespace, req.Name)
		if !ok {
			if !h.View.HasSynced() {
				return admission.Errored(http.StatusServiceUnavailable,
					errors.New("rampart is still loading its view of the cluster; retry in a few seconds"))
			}
			return admission.Allowed("")
		}
		uid, r.Scale = u, true
		r.Guard = labelGuard(labels, nil)
		r.Old, r.New = replicasAt(&old, ".spec.replicas", 0), replicasAt(&cur, ".spec.replicas", 0)
		if w, ok := builtinWorkloads[gr]; ok {
			kind = w.kind
		}
	case "":
		path, _, ok := replicasPath(h.View, gr)
		if !ok {
			return admission.Allowed("") // not a kind with replicas
		}
		uid = old.GetUID()
		// Judged by the labels before and after: removing the label in the
		// same write does not escape it.
		r.Guard = labelGuard(old.GetLabels(), cur.GetLabels())
		r.Old, r.New = replicasAt(&old, path, 1), replicasAt(&cur, path, 1)
		r.Confirm = cur.GetAnnotations()[v1alpha1.AnnotationConfirmReplicas]
	default:
		return admission.Allowed("")
	}
	r.Exempt = protection.Names(h.Exempt, req.UserInfo)
	v := replicas.Decide(r)
	if v.Allowed {
		return admission.Allowed("")
	}
	deny(h.Recorder, req, kind, r.Object, uid, v.Rule, "Scale", v.Message)
	return admission.Denied(v.Message)
}

// labelGuard is GuardAll when either label set asks for explicit replicas.
func labelGuard(a, b map[string]string) v1alpha1.ReplicaGuard {
	if a[v1alpha1.LabelExplicitReplicas] == "true" || b[v1alpha1.LabelExplicitReplicas] == "true" {
		return v1alpha1.GuardAll
	}
	return ""
}
