package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/replicas"
)

// ReplicasPath is where the explicit-replicas webhooks for the label and
// for the scale subresource are served.
const ReplicasPath = "/validate/replicas"

// ScaleTargetKeys is the key set of the workloads whose scale subresource
// is guarded, as "group/resource/namespace/name": the scale protection
// declares it (internal/protection/scale/admit), the replicas handler puts
// a workload gaining the explicit-replicas label in it.
const ScaleTargetKeys = "scale"

// Replicas decides writes that change spec.replicas with
// internal/protection/replicas, for the rampart.io/explicit-replicas label
// and for ProtectionPolicies with explicitReplicas.
type Replicas struct {
	View     ScaleTargetsView
	Policies Policies
	// Exempt are requesters the label rule never denies (e.g. the
	// horizontal-pod-autoscaler's service account); policies carry their own.
	Exempt   v1alpha1.Subjects
	Recorder events.EventRecorder
	// InForce registers the scale subresource of a workload gaining the
	// label before the request is admitted; nil skips that.
	InForce InForce
	// LiveLabels reads a workload's labels from the API server, when the
	// view says a scale target carries no rule (it may lag); nil trusts
	// the view.
	LiveLabels func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error)
	// Mapper names resources as discovery does in denials; nil guesses.
	Mapper meta.RESTMapper
}

var _ admission.Handler = (*Replicas)(nil)

// ScaleTargetsView is what the Replicas handler reads of the cluster: a
// scale request carries no labels, so the workload's and its namespace's
// come from the view.
type ScaleTargetsView interface {
	ReplicasPaths
	// HasSynced is false until the caches hold the whole cluster.
	HasSynced() bool
	// WorkloadLabels are the labels and UID of a workload with replicas.
	WorkloadLabels(gr schema.GroupResource, namespace, name string) (map[string]string, types.UID, bool)
	// NamespaceLabels are a namespace's labels.
	NamespaceLabels(ns string) (map[string]string, bool)
}

// guardSource is one rule that may guard a write: the label or a policy.
type guardSource struct {
	guard  v1alpha1.ReplicaGuard
	source protection.Source
	exempt bool
	// enforce is false for a Warn-mode policy.
	enforce bool
}

// Handle implements admission.Handler.
func (h *Replicas) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Resource.Group == "" && req.Resource.Resource == "namespaces" {
		return h.namespaceInForce(ctx, req)
	}
	if resp := h.labelInForce(ctx, req); resp != nil {
		return *resp
	}
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
	base := replicas.Request{Object: protection.Object{Resource: gr, Namespace: req.Namespace, Name: req.Name, Singular: protection.Singular(h.Mapper, gr)}}
	var uid types.UID
	var sources []guardSource
	kind := schema.GroupVersionKind(req.Kind)
	labelRule := func(labels ...map[string]string) guardSource {
		return guardSource{guard: labelGuard(labels...), source: protection.Source{Label: v1alpha1.LabelExplicitReplicas},
			exempt: protection.Names(h.Exempt, req.UserInfo), enforce: true}
	}
	switch req.SubResource {
	case "scale":
		// A Scale carries no labels: the workload's, and its namespace's,
		// come from the view, and every rule that may guard it is applied.
		labels, u, ok := h.View.WorkloadLabels(gr, req.Namespace, req.Name)
		fresh := false // labels read from the API server
		if !ok {
			if !h.View.HasSynced() {
				return admission.Errored(http.StatusServiceUnavailable,
					errors.New("rampart is still loading its view of the cluster; retry in a few seconds"))
			}
			// The view may not have a workload just created: this webhook
			// reaches only registered targets, so ask the API server.
			live, found, err := h.liveLabels(ctx, req)
			if err != nil {
				return admission.Errored(http.StatusServiceUnavailable, err)
			}
			if !found {
				return admission.Allowed("")
			}
			labels, fresh = live, true
		}
		uid, base.Scale = u, true
		base.Old, base.New = replicasAt(&old, ".spec.replicas", 0), replicasAt(&cur, ".spec.replicas", 0)
		if w, ok := builtinWorkloads[gr]; ok {
			kind = w.kind
		}
		ps, err := h.scalePolicies(ctx, gr, req.Namespace, labels)
		if err != nil {
			return admission.Errored(http.StatusServiceUnavailable, err)
		}
		if labelGuard(labels) == "" && len(ps) == 0 {
			// Registered as a target, yet the view sees no rule: it may
			// lag behind a label or a policy just added. Ask the API server.
			if !fresh {
				live, found, err := h.liveLabels(ctx, req)
				if err != nil {
					return admission.Errored(http.StatusServiceUnavailable, err)
				}
				if found {
					labels = live
				}
			}
			if ps, err = h.scalePoliciesLive(ctx, gr, req.Namespace, labels); err != nil {
				return admission.Errored(http.StatusServiceUnavailable, err)
			}
		}
		sources = append(sources, labelRule(labels))
		for _, p := range ps {
			sources = append(sources, guardSource{guard: policy.Guard(&p), source: protection.Source{Policy: p.Name},
				exempt: protection.Names(p.Spec.Exempt, req.UserInfo), enforce: policy.Enforced(&p)})
		}
	case "":
		path, _, ok := replicasPath(h.View, gr)
		if !ok {
			return admission.Allowed("") // not a kind with replicas
		}
		uid = old.GetUID()
		base.Old, base.New = replicasAt(&old, path, 1), replicasAt(&cur, path, 1)
		base.Confirm = cur.GetAnnotations()[v1alpha1.AnnotationConfirmReplicas]
		pol, resp := findPolicy(ctx, h.Policies, req, &old)
		switch {
		case resp != nil:
			return *resp
		case pol != nil:
			sources = append(sources, guardSource{guard: policy.Guard(pol), source: protection.Source{Policy: pol.Name}, enforce: policy.Enforced(pol)})
		default:
			// Decided by the labels before and after: removing the label in
			// the same write does not escape it.
			sources = append(sources, labelRule(old.GetLabels(), cur.GetLabels()))
		}
	default:
		return admission.Allowed("")
	}
	var warnings []string
	for _, s := range sources {
		r := base
		r.Guard, r.Source, r.Exempt = s.guard, s.source, s.exempt
		v := replicas.Decide(r)
		resp := Respond(h.Recorder, req, About{Kind: kind, Object: r.Object, UID: uid, Action: "Scale", Warn: !s.enforce}, v)
		if !resp.Allowed {
			return resp
		}
		warnings = append(warnings, resp.Warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// namespaceInForce admits a label change that brings a namespace under a
// policy (through the policy's namespaces webhook) once the policy's
// webhooks reach the namespace by name on every API server: they are kept
// until the API servers' caches and Rampart's view have the namespace's
// new labels (and the scale webhook names its workloads).
func (h *Replicas) namespaceInForce(ctx context.Context, req admission.Request) admission.Response {
	name, ok := NameFrom(ctx)
	if !ok || h.InForce == nil || h.Policies == nil || DryRun(req) || req.SubResource != "" || req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var old, cur metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := json.Unmarshal(req.Object.Raw, &cur); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	pol, found, err := h.Policies.Policy(ctx, name)
	if err != nil {
		return admission.Errored(http.StatusServiceUnavailable, err)
	}
	if !found {
		return admission.Allowed("")
	}
	sel, err := metav1.LabelSelectorAsSelector(pol.Spec.NamespaceSelector)
	if err != nil || !sel.Matches(labels.Set(cur.Labels)) || sel.Matches(labels.Set(old.Labels)) {
		return admission.Allowed("") // not brought under the policy by this change
	}
	if err := h.InForce.Widen(ctx, RelabelledWidening, Widening{Object: pol, Key: req.Name}); err != nil {
		return NotLoadedStatus(fmt.Sprintf("the label change of namespace %s, which brings it under ProtectionPolicy %s,", req.Name, pol.Name), err)
	}
	return admission.Allowed("")
}

// liveLabels reads the labels of a scale request's workload from the API
// server; found is false without LiveLabels.
func (h *Replicas) liveLabels(ctx context.Context, req admission.Request) (map[string]string, bool, error) {
	if h.LiveLabels == nil {
		return nil, false, nil
	}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	return h.LiveLabels(ctx, gvr, req.Namespace, req.Name)
}

// LivePolicies lists policies from the API server rather than a cache;
// a Policies that can implements it.
type LivePolicies interface {
	ListLive(ctx context.Context) ([]v1alpha1.ProtectionPolicy, error)
}

// scalePoliciesLive is scalePolicies from the API server's list of
// policies and its namespace labels (the view may lag behind a namespace
// just relabelled into a policy), when the handler can read them.
func (h *Replicas) scalePoliciesLive(ctx context.Context, gr schema.GroupResource, ns string, objLabels map[string]string) ([]v1alpha1.ProtectionPolicy, error) {
	if h.Policies == nil {
		return nil, nil
	}
	list := h.Policies.List
	if live, ok := h.Policies.(LivePolicies); ok {
		list = live.ListLive
	}
	all, err := list(ctx)
	if err != nil {
		return nil, err
	}
	nsLabels, known := h.View.NamespaceLabels(ns)
	if h.LiveLabels != nil {
		l, found, err := h.LiveLabels(ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns)
		if err != nil {
			return nil, err
		}
		if found {
			nsLabels, known = l, true
		}
	}
	return covering(all, gr, policy.NamespaceLabels(ns, nsLabels, known), objLabels), nil
}

// scalePolicies are the policies guarding the replicas of a workload.
func (h *Replicas) scalePolicies(ctx context.Context, gr schema.GroupResource, ns string, objLabels map[string]string) ([]v1alpha1.ProtectionPolicy, error) {
	if h.Policies == nil {
		return nil, nil
	}
	all, err := h.Policies.List(ctx)
	if err != nil {
		return nil, err
	}
	l, known := h.View.NamespaceLabels(ns)
	return covering(all, gr, policy.NamespaceLabels(ns, l, known), objLabels), nil
}

func covering(all []v1alpha1.ProtectionPolicy, gr schema.GroupResource, nsLabels, objLabels map[string]string) []v1alpha1.ProtectionPolicy {
	var out []v1alpha1.ProtectionPolicy
	for _, p := range policy.Select(all, policy.Guarding, gr, nsLabels, objLabels) {
		out = append(out, *p)
	}
	return out
}

// labelGuard is GuardAll when any of the label sets asks for explicit
// replicas.
func labelGuard(sets ...map[string]string) v1alpha1.ReplicaGuard {
	for _, s := range sets {
		if s[v1alpha1.LabelExplicitReplicas] == "true" {
			return v1alpha1.GuardAll
		}
	}
	return ""
}
