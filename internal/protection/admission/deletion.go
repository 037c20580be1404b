// Package admission adapts Rampart's decisions to Kubernetes admission
// webhooks: it builds each decision's request from an AdmissionReview,
// answers every verdict alike (respond: response, Event, metric), and
// registers the webhook
// configurations with the API server.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// DeletionPath is where the deletion-protection webhook is served.
const DeletionPath = "/validate/deletion"

// ReplicasPaths says where a custom resource keeps its replicas.
type ReplicasPaths interface {
	// ScaleReplicasPath is a custom resource's spec-replicas JSON path when
	// its CRD has a scale subresource.
	ScaleReplicasPath(gr schema.GroupResource) (string, bool)
}

// DeletionView is what the Deletion handler reads of the cluster: the
// deletion decision's view plus what the handler needs to build requests.
type DeletionView interface {
	deletion.View
	ReplicasPaths
	// HasSynced is false until the caches hold the whole cluster.
	HasSynced() bool
}

// Deletion decides DELETE requests with internal/protection/deletion, for
// the rampart.io/protection label or, when reached through a policy's
// webhook, for that ProtectionPolicy.
type Deletion struct {
	View     DeletionView
	Policies Policies
	// Recorder writes an Event on each denied object; nil writes none.
	Recorder events.EventRecorder
	// Mapper names resources as discovery does in denials; nil guesses.
	Mapper meta.RESTMapper
	// Bin, when set, keeps a copy of every protected object before its
	// delete is admitted (the recycle bin); nil keeps none.
	Bin Capturer
}

// Capturer stores a copy of an object durably and returns its name in the
// store (recyclebin.Keeper).
type Capturer interface {
	Capture(ctx context.Context, e recyclebin.Entry) (string, error)
}

// captureWithin bounds a capture below the deletion webhook's timeout
// (5 s, Builder.Webhook): a store that does not answer, such as an S3
// server that is down (minio-go retries for up to about 8 s), must get the
// refusal that says why, not the API server's bare webhook timeout.
const captureWithin = 4 * time.Second

// Capture stores e in bin within captureWithin.
func Capture(ctx context.Context, bin Capturer, e recyclebin.Entry) error {
	ctx, cancel := context.WithTimeout(ctx, captureWithin)
	defer cancel()
	_, err := bin.Capture(ctx, e)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (the store did not answer within %v)", err, captureWithin)
	}
	return err
}

var _ admission.Handler = (*Deletion)(nil)

// workload describes a built-in kind that runs pods.
type workload struct {
	kind schema.GroupVersionKind
	// replicas is set when the kind has spec.replicas (defaulting to 1).
	replicas bool
}

// builtinWorkloads are the built-in kinds that run pods.
var builtinWorkloads = map[schema.GroupResource]workload{
	{Group: "apps", Resource: "deployments"}:  {schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, true},
	{Group: "apps", Resource: "replicasets"}:  {schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}, true},
	{Group: "apps", Resource: "statefulsets"}: {schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}, true},
	{Resource: "replicationcontrollers"}:      {schema.GroupVersionKind{Version: "v1", Kind: "ReplicationController"}, true},
	{Group: "apps", Resource: "daemonsets"}:   {schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, false},
	{Group: "batch", Resource: "jobs"}:        {schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, false},
	{Group: "batch", Resource: "cronjobs"}:    {schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, false},
}

// Handle implements admission.Handler.
func (h *Deletion) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	old, bad := DeletedObject(req)
	if bad != nil {
		return *bad
	}
	// GetLabels reads labels it cannot parse as none: a protected object
	// would be let go. Such a review is refused instead.
	if _, _, err := unstructured.NestedStringMap(old.Object, "metadata", "labels"); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("oldObject: %w", err))
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
	r.Singular = protection.Singular(h.Mapper, r.Resource)
	pol, resp := findPolicy(ctx, h.Policies, req, old)
	if resp != nil {
		return *resp
	}
	if pol != nil {
		r.Level, r.Source = pol.Spec.Protection, protection.Source{Policy: pol.Name}
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
	r.Workload, r.Replicas = h.replicas(r.Resource, old)
	if r.Level == v1alpha1.ProtectionCascading && !h.View.HasSynced() {
		// Fail closed, and say so: better a delayed delete than a lost
		// business.
		return admission.Errored(http.StatusServiceUnavailable,
			errors.New("rampart is still loading its view of the cluster; retry in a few seconds"))
	}
	v := deletion.Decide(r, h.View)
	s := About{Kind: schema.GroupVersionKind(req.Kind), Object: r.Object, UID: r.UID, Action: "Delete", Warn: pol != nil && !policy.Enforced(pol)}
	if h.Bin != nil && !DryRun(req) && (v.Allowed || s.Warn) {
		v = h.capture(ctx, req, r, v, s.Warn)
	}
	return Respond(h.Recorder, req, s, v)
}

// capture keeps a copy of the object the admitted delete ends, and
// refuses the delete when it cannot: a Warn-mode policy (warn) only
// warns, of both refusals.
func (h *Deletion) capture(ctx context.Context, req admission.Request, r deletion.Request, v verdict.Verdict, warn bool) verdict.Verdict {
	err := Capture(ctx, h.Bin, recyclebin.Entry{
		Resource:  schema.GroupVersionResource(req.Resource),
		Kind:      req.Kind.Kind,
		Namespace: r.Namespace,
		Name:      r.Name,
		UID:       r.UID,
		DeletedBy: req.UserInfo.Username,
		Object:    req.OldObject.Raw,
	})
	if err == nil {
		return v
	}
	src := r.Source
	if src.Policy == "" {
		src.Label = v1alpha1.LabelProtection
	}
	refused := recyclebin.CaptureRefused(r.Object, src.String(), src.Lift(r.Object)+", and the delete goes through without a copy.", err)
	if warn && !v.Allowed {
		refused.Message = v.Message + "; and " + refused.Message
	}
	return refused
}

// DeletedObject is the object a DELETE ends: the API server sends it as
// oldObject. A review without one, or one that does not decode, is
// answered with an error.
func DeletedObject(req admission.Request) (*unstructured.Unstructured, *admission.Response) {
	if len(req.OldObject.Raw) == 0 {
		bad := admission.Errored(http.StatusBadRequest, errors.New("DELETE admission request carries no oldObject"))
		return nil, &bad
	}
	// Unstructured's own decoding keeps integers as int64.
	old := &unstructured.Unstructured{}
	if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
		bad := admission.Errored(http.StatusBadRequest, err)
		return nil, &bad
	}
	return old, nil
}

// findPolicy finds the ProtectionPolicy whose webhook the request came
// through. It returns a response when the request is settled without a
// decision: the policy is gone, no longer selects the object (the API
// server may still hold an older configuration), or exempts the requester.
func findPolicy(ctx context.Context, policies Policies, req admission.Request, obj *unstructured.Unstructured) (*v1alpha1.ProtectionPolicy, *admission.Response) {
	name, ok := NameFrom(ctx)
	if !ok {
		return nil, nil
	}
	allowed := admission.Allowed("")
	if policies == nil {
		return nil, &allowed
	}
	pol, found, err := policies.Policy(ctx, name)
	if err != nil {
		errored := admission.Errored(http.StatusServiceUnavailable, err)
		return nil, &errored
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	if !found || !policy.Covers(pol, gr, nil, obj.GetLabels()) || protection.Names(pol.Spec.Exempt, req.UserInfo) {
		return nil, &allowed
	}
	return pol, nil
}

// replicas says whether the object is a workload and its desired replicas.
func (h *Deletion) replicas(gr schema.GroupResource, obj *unstructured.Unstructured) (bool, *int64) {
	path, workload, ok := replicasPath(h.View, gr)
	if !workload || !ok {
		return workload, nil
	}
	n := replicasAt(obj, path, 1)
	return true, &n
}

// replicasPath is the JSON path of a workload's desired replicas: workload
// says it runs pods, ok that it has a replicas field.
func replicasPath(v ReplicasPaths, gr schema.GroupResource) (path string, workload, ok bool) {
	if w, builtin := builtinWorkloads[gr]; builtin {
		return ".spec.replicas", true, w.replicas
	}
	p, ok := v.ScaleReplicasPath(gr)
	return p, ok, ok
}

// replicasAt reads the replicas at path, or def when absent: a workload's
// replicas default to 1, while a Scale omits a count of 0.
func replicasAt(obj *unstructured.Unstructured, path string, def int64) int64 {
	n, found, err := unstructured.NestedInt64(obj.Object, strings.Split(strings.TrimPrefix(path, "."), ".")...)
	if err != nil || !found {
		return def
	}
	return n
}

func DryRun(req admission.Request) bool { return req.DryRun != nil && *req.DryRun }
