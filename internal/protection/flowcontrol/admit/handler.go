// Package admit is the DeletionFlowControl protection as the API server
// sees it: its webhooks (plugin.go), its handler (handler.go), its Ready
// condition (ready.go). The decision itself is the parent package.
package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/ledger"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/flowcontrol"
)

// Prefix serves each DeletionFlowControl's webhook, followed by its name.
const Prefix = "/validate/flowcontrol/"

var (
	trips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_flowcontrol_trips_total",
		Help: "Times a DeletionFlowControl's breaker tripped.",
	}, []string{"name"})
	flowDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_flowcontrol_decisions_total",
		Help: "Deletes a DeletionFlowControl judged, by outcome (admitted, denied, exempt, dryrun; unavailable: a pod on a NotReady node, not counted).",
	}, []string{"name", "outcome"})
)

func init() { metrics.Registry.MustRegister(trips, flowDecisions) }

// FlowControl counts and limits deletes for DeletionFlowControls. Every
// admitted delete is written to the flow control's status with optimistic
// concurrency before it is admitted (internal/plumbing/ledger): the count is exact
// across replicas and survives restarts.
type FlowControl struct {
	// Client reads and writes DeletionFlowControls directly (not from a
	// cache: the count must be the latest).
	Client   client.Client
	Pods     rampartadmission.PodLabels
	Recorder events.EventRecorder
	// Clock is the time deletes are counted at; nil is the real clock.
	Clock clock.PassiveClock
	// Nodes says which nodes are NotReady: deleting a pod there is the
	// node lifecycle controller's healing, not counted unless much of the
	// cluster is NotReady at once (PartitionThreshold, as for budgets).
	// nil counts every delete.
	Nodes              rampartadmission.NodeHealth
	PartitionThreshold float64

	counted ledger.Lazy[*v1alpha1.DeletionFlowControl]
}

// ledger counts admitted deletes in the flow controls' status. It
// remembers each admitted delete by the deleted object: the API server may
// ask again about the same DELETE (it re-runs admission when a concurrent
// write forces a retry), and counting it twice, or denying the retry after
// admitting the first ask, would be wrong.
func (h *FlowControl) ledger() *ledger.Ledger[*v1alpha1.DeletionFlowControl] {
	return h.counted.Of(h.Client, nil, h.Clock, func() *v1alpha1.DeletionFlowControl { return &v1alpha1.DeletionFlowControl{} })
}

var _ admission.Handler = (*FlowControl)(nil)

// Handle implements admission.Handler.
func (h *FlowControl) Handle(ctx context.Context, req admission.Request) admission.Response {
	name, ok := rampartadmission.NameFrom(ctx)
	if !ok {
		return admission.Allowed("")
	}
	subj := rampartadmission.About{Kind: schema.GroupVersionKind(req.Kind), Action: "Delete"}
	subj.Object = protection.Object{Namespace: req.Namespace, Name: req.Name}
	subj.Object.Resource.Group, subj.Object.Resource.Resource = req.Resource.Group, req.Resource.Resource
	var (
		objLabels map[string]string
		// id is the memory of an admitted delete (see ledger): a DELETE's
		// object UID. An eviction has none: the API server asks once per
		// eviction, and the pod's name is no identity (a StatefulSet's pod
		// comes back under the same name, and must be counted again).
		id  string
		dry = rampartadmission.DryRun(req)
	)
	switch {
	case req.Operation == admissionv1.Delete:
		var old unstructured.Unstructured
		if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		subj.Object.Name, subj.UID, objLabels = old.GetName(), old.GetUID(), old.GetLabels()
		id = string(old.GetUID())
		if h.onDeadNode(req, &old) {
			flowDecisions.WithLabelValues(name, "unavailable").Inc()
			return admission.Allowed("")
		}
	case req.Operation == admissionv1.Create && req.SubResource == "eviction":
		subj.Kind = corev1.SchemeGroupVersion.WithKind("Pod")
		// An eviction's dry run may be in its body alone (kubectl drain
		// --dry-run=server): never counted either.
		var ev policyv1.Eviction
		if err := json.Unmarshal(req.Object.Raw, &ev); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		dry = dry || (ev.DeleteOptions != nil && slices.Contains(ev.DeleteOptions.DryRun, metav1.DryRunAll))
		var found bool
		var err error
		if objLabels, found, err = h.podLabels(ctx, req.Namespace, req.Name); err != nil {
			return admission.Errored(http.StatusServiceUnavailable, err)
		} else if !found {
			return admission.Allowed("") // no such pod: the eviction deletes nothing
		}
	default:
		return admission.Allowed("")
	}
	now := rampartadmission.ClockOrReal(h.Clock).Now()
	var (
		v       verdict.Verdict
		outcome string // "counted", "exempt", or "" for a delete the flow control does not count
		invalid error
	)
	out, err := h.ledger().Decide(ctx, ledger.Request{Object: client.ObjectKey{Name: name}, ID: id, DryRun: dry},
		func(dfc *v1alpha1.DeletionFlowControl) (ledger.Decision, error) {
			v, outcome = verdict.Allow, ""
			switch {
			case req.SubResource == "eviction" && dfc.Spec.CountEvictions != nil && !*dfc.Spec.CountEvictions:
				return ledger.Decision{Verdict: verdict.Allow}, nil
			case !selected(dfc, objLabels):
				// An eviction of a pod the objectSelector leaves out (the
				// evictions' webhook reaches every pod; see the plugin).
				return ledger.Decision{Verdict: verdict.Allow}, nil
			case exempt(dfc, req, objLabels):
				outcome = "exempt"
				return ledger.Decision{Verdict: verdict.Allow}, nil
			}
			v, invalid = flowcontrol.Decide(flowcontrol.Request{Name: name, Spec: dfc.Spec, Requester: req.UserInfo.Username,
				Object: subj.Object.Describe()}, &dfc.Status, now)
			if invalid != nil {
				return ledger.Decision{}, invalid
			}
			flowcontrol.SyncCondition(&dfc.Status, dfc.Generation)
			outcome = "counted"
			// A denial is written too: it may trip the breaker, and the
			// status lists recent denials.
			return ledger.Decision{Verdict: v, Write: true}, nil
		})
	switch {
	case invalid != nil:
		return admission.Errored(http.StatusInternalServerError, invalid)
	case err != nil:
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("recording the delete in DeletionFlowControl %s: %w", name, err))
	case out.Gone || out.Repeated || outcome == "":
		return admission.Allowed("")
	case outcome == "exempt":
		flowDecisions.WithLabelValues(name, "exempt").Inc()
		return admission.Allowed("")
	case dry:
		return rampartadmission.Respond(h.Recorder, req, subj, v) // decided, never counted
	}
	dfc := out.Object
	if flowcontrol.Tripped(v) {
		trips.WithLabelValues(name).Inc()
		if h.Recorder != nil {
			h.Recorder.Eventf(dfc, nil, corev1.EventTypeWarning, "BreakerTripped", "Trip", "%s", v.Message)
		}
	}
	switch {
	case dfc.Spec.Mode == v1alpha1.FlowDryRun:
		flowDecisions.WithLabelValues(name, "dryrun").Inc()
		if flowcontrol.Tripped(v) {
			return admission.Allowed("").WithWarnings("rampart (DryRun): " + v.Message)
		}
		return admission.Allowed("")
	case v.Allowed:
		flowDecisions.WithLabelValues(name, "admitted").Inc()
		return admission.Allowed("")
	default:
		flowDecisions.WithLabelValues(name, "denied").Inc()
		return rampartadmission.Respond(h.Recorder, req, subj, v)
	}
}

// onDeadNode says whether a delete is of a pod on a node that is NotReady
// or unreachable, outside a partition: the node lifecycle controller
// removing what a dead machine ran, or someone clearing it by hand. Such a
// pod is lost already; counting its delete would hold back the
// replacement of a whole node's pods behind the flow control's rate, which
// kube-controller-manager itself never does (it limits nodes, not pods).
// Whether most of the cluster's nodes are NotReady at once is the
// partition that must not become a mass deletion: then they count.
func (h *FlowControl) onDeadNode(req admission.Request, old *unstructured.Unstructured) bool {
	if h.Nodes == nil || req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "" {
		return false
	}
	node, _, _ := unstructured.NestedString(old.Object, "spec", "nodeName")
	if node == "" || h.Nodes.NodeUnavailable(node) == "" {
		return false
	}
	return !h.Nodes.NodeCount().Partitioned(h.PartitionThreshold)
}

// podLabels are a pod's labels: cached, or read live for a pod the cache
// does not hold yet; found is false for a pod that does not exist.
func (h *FlowControl) podLabels(ctx context.Context, ns, name string) (labels map[string]string, found bool, err error) {
	if h.Pods != nil {
		if l, ok := h.Pods.PodLabels(ns, name); ok {
			return l, true, nil
		}
	}
	var p metav1.PartialObjectMetadata
	p.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
	}
	return p.Labels, true, nil
}

// selected says whether the flow control's objectSelector takes in an
// object with these labels.
func selected(dfc *v1alpha1.DeletionFlowControl, objLabels map[string]string) bool {
	if dfc.Spec.ObjectSelector == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(dfc.Spec.ObjectSelector)
	// A selector that does not parse takes in everything: counted, never
	// waved through.
	return err != nil || s.Matches(labels.Set(objLabels))
}

func exempt(dfc *v1alpha1.DeletionFlowControl, req admission.Request, objLabels map[string]string) bool {
	if protection.Names(dfc.Spec.Exempt.Subjects, req.UserInfo) {
		return true
	}
	if sel := dfc.Spec.Exempt.ObjectSelector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && !s.Empty() && s.Matches(labels.Set(objLabels))
	}
	return false
}
