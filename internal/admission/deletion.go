// Package admission adapts Rampart's decisions to Kubernetes admission
// webhooks: it builds each decision's request view from an AdmissionReview,
// reports denials (response, Event, metric), and registers the webhook
// configurations with the API server.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/deletion"
)

// DeletionPath is where the deletion-protection webhook is served.
const DeletionPath = "/validate/deletion"

// ClusterView is what the admission adapters read of the cluster: the
// deletion decision's view plus what the adapter needs to build requests.
type ClusterView interface {
	deletion.View
	// HasSynced is false until the caches hold the whole cluster.
	HasSynced() bool
	// ScaleReplicasPath is a custom resource's spec-replicas JSON path when
	// its CRD has a scale subresource.
	ScaleReplicasPath(gr schema.GroupResource) (string, bool)
}

// Deletion judges DELETE requests with internal/protection/deletion.
type Deletion struct {
	View ClusterView
	// Recorder writes an Event on each denied object; nil writes none.
	Recorder events.EventRecorder
}

var _ admission.Handler = (*Deletion)(nil)

// builtinWorkloads have replicas or run pods; true means spec.replicas
// exists (defaulting to 1).
var builtinWorkloads = map[schema.GroupResource]bool{
	{Group: "apps", Resource: "deployments"}:  true,
	{Group: "apps", Resource: "replicasets"}:  true,
	{Group: "apps", Resource: "statefulsets"}: true,
	{Resource: "replicationcontrollers"}:      true,
	{Group: "apps", Resource: "daemonsets"}:   false,
	{Group: "batch", Resource: "jobs"}:        false,
	{Group: "batch", Resource: "cronjobs"}:    false,
}

// Handle implements admission.Handler.
func (h *Deletion) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	// A DELETE carries the object being deleted as oldObject.
	if len(req.OldObject.Raw) == 0 {
		return admission.Errored(http.StatusBadRequest, errors.New("DELETE admission request carries no oldObject"))
	}
	// Unstructured's own decoding keeps integers as int64.
	var old unstructured.Unstructured
	if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	r := deletion.Request{
		Object: protection.Object{
			Resource:  schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource},
			Namespace: old.GetNamespace(),
			// The request names no object for the items of a DeleteCollection.
			Name: old.GetName(),
		},
		UID:   old.GetUID(),
		Level: v1alpha1.ProtectionLevel(old.GetLabels()[v1alpha1.LabelProtection]),
	}
	if r.Level == "" {
		return admission.Allowed("")
	}
	if len(req.Options.Raw) > 0 {
		var opts metav1.DeleteOptions
		if err := json.Unmarshal(req.Options.Raw, &opts); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if opts.PropagationPolicy != nil {
			r.Propagation = *opts.PropagationPolicy
		} else if opts.OrphanDependents != nil && *opts.OrphanDependents {
			r.Propagation = metav1.DeletePropagationOrphan
		}
	}
	r.Workload, r.Replicas = h.replicas(r.Resource, &old)
	if r.Level == v1alpha1.ProtectionCascading && !h.View.HasSynced() {
		// Fail closed, and say so: better a delayed delete than a lost
		// business.
		return admission.Errored(http.StatusServiceUnavailable,
			errors.New("rampart is still loading its view of the cluster; retry in a few seconds"))
	}
	v := deletion.Decide(r, h.View)
	if v.Allowed {
		return admission.Allowed("")
	}
	h.report(req, r, v)
	return admission.Denied(v.Message)
}

// replicas says whether the object is a workload and its desired replicas.
func (h *Deletion) replicas(gr schema.GroupResource, obj *unstructured.Unstructured) (bool, *int64) {
	hasReplicas, builtin := builtinWorkloads[gr]
	path := ".spec.replicas"
	if !builtin {
		p, ok := h.View.ScaleReplicasPath(gr)
		if !ok {
			return false, nil
		}
		path, hasReplicas = p, true
	}
	if !hasReplicas {
		return true, nil
	}
	n, found, err := unstructured.NestedInt64(obj.Object, strings.Split(strings.TrimPrefix(path, "."), ".")...)
	if err != nil {
		return true, nil
	}
	if !found {
		n = 1 // the API default for every built-in replicas field
	}
	return true, &n
}

// report counts a denial and, unless it is a dry run, records an Event.
func (h *Deletion) report(req admission.Request, r deletion.Request, v deletion.Verdict) {
	denials.WithLabelValues(v.Rule, r.Resource.String()).Inc()
	if h.Recorder == nil || dryRun(req) {
		return // a dry run has no side effects, and an Event is one
	}
	ref := &corev1.ObjectReference{
		APIVersion: schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String(),
		Kind:       req.Kind.Kind,
		Namespace:  r.Namespace,
		Name:       r.Name,
		UID:        r.UID,
	}
	h.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "DeleteDenied", "Delete",
		"%s denied DELETE by %s: %s", v.Rule, req.UserInfo.Username, v.Message)
}

func dryRun(req admission.Request) bool { return req.DryRun != nil && *req.DryRun }
