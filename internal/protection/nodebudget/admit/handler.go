// Package admit is the NodeDisruptionBudget protection as the API server
// sees it: its webhooks (plugin.go), its handler (handler.go), its Ready
// condition (ready.go), its gauges (metrics.go). The decision itself is
// the parent package.
package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	"github.com/rampart-io/rampart/internal/protection/nodebudget"
)

// Prefix serves each NodeDisruptionBudget's webhook, followed by its name.
const Prefix = "/validate/nodebudget/"

var decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_nodebudget_decisions_total",
	Help: "Departures of nodes (delete, cordon, taint) a NodeDisruptionBudget judged, by kind and outcome (admitted, denied, exempt, free: the node was out of service already).",
}, []string{"name", "kind", "outcome"})

func init() { metrics.Registry.MustRegister(decisions) }

// Handler judges the departures of the nodes a NodeDisruptionBudget
// selects. Every admitted departure is written to the budget's status with
// optimistic concurrency before it is admitted (internal/plumbing/ledger):
// two replicas admitting a cordon each at the floor cannot both win.
type Handler struct {
	// Client reads and writes NodeDisruptionBudgets directly (the
	// departures recorded must be the latest).
	Client   client.Client
	Recorder events.EventRecorder
	// Nodes reads the selected nodes from the cluster view.
	Nodes rampartadmission.NodeHealth
	// Clock is the time departures are recorded at; nil is the real clock.
	Clock clock.PassiveClock

	ledger ledger.Lazy[*v1alpha1.NodeDisruptionBudget]
}

func (h *Handler) book() *ledger.Ledger[*v1alpha1.NodeDisruptionBudget] {
	return h.ledger.Of(h.Client, nil, h.Clock, func() *v1alpha1.NodeDisruptionBudget { return &v1alpha1.NodeDisruptionBudget{} })
}

var _ admission.Handler = (*Handler)(nil)

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	name, ok := rampartadmission.NameFrom(ctx)
	if !ok || req.Resource.Resource != "nodes" || req.SubResource != "" {
		return admission.Allowed("")
	}
	var old, updated *corev1.Node
	if err := decode(req.OldObject.Raw, &old); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if req.Operation == admissionv1.Update {
		if err := decode(req.Object.Raw, &updated); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
	} else if req.Operation != admissionv1.Delete {
		return admission.Allowed("")
	}
	kind := nodebudget.Leaves(old, updated)
	if kind == "" {
		decisions.WithLabelValues(name, "", "free").Inc()
		return admission.Allowed("")
	}
	subj := rampartadmission.About{Kind: corev1.SchemeGroupVersion.WithKind("Node"), Action: kind, UID: old.UID,
		Object: protection.Object{Name: old.Name}}
	subj.Object.Resource.Resource = "nodes"
	var (
		v       verdict.Verdict
		exempt  bool
		invalid error
	)
	out, err := h.book().Decide(ctx, ledger.Request{Object: client.ObjectKey{Name: name}, DryRun: rampartadmission.DryRun(req)},
		func(nb *v1alpha1.NodeDisruptionBudget) (ledger.Decision, error) {
			if exempt = protection.Names(nb.Spec.Exempt, req.UserInfo); exempt {
				return ledger.Decision{Verdict: verdict.Allow}, nil
			}
			r, err := h.request(nb, old.Name, old.ResourceVersion, kind, req.UserInfo.Username)
			if err != nil {
				invalid = err
				return ledger.Decision{}, err
			}
			var write bool
			if v, write, invalid = nodebudget.Decide(nb.Spec, &nb.Status, r, rampartadmission.ClockOrReal(h.Clock).Now()); invalid != nil {
				return ledger.Decision{}, invalid
			}
			return ledger.Decision{Verdict: v, Write: write}, nil
		})
	switch {
	case invalid != nil:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("NodeDisruptionBudget %s: %w", name, invalid))
	case err != nil:
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("recording the departure of node %s in NodeDisruptionBudget %s: %w", old.Name, name, err))
	case out.Gone:
		return admission.Allowed("")
	case exempt:
		decisions.WithLabelValues(name, kind, "exempt").Inc()
		return admission.Allowed("")
	case v.Allowed:
		decisions.WithLabelValues(name, kind, "admitted").Inc()
		return admission.Allowed("")
	}
	decisions.WithLabelValues(name, kind, "denied").Inc()
	if h.Recorder != nil && !rampartadmission.DryRun(req) && out.Object != nil {
		h.Recorder.Eventf(out.Object, nil, corev1.EventTypeWarning, "DepartureDenied", kind, "%s", v.Message)
	}
	return rampartadmission.Respond(h.Recorder, req, subj, v)
}

// request is the departure of node as the budget sees it: the nodes it
// selects now, from the cluster view, with the requested node read as in
// service (the request's copy is newer than the view's).
func (h *Handler) request(nb *v1alpha1.NodeDisruptionBudget, node, version, kind, user string) (nodebudget.Request, error) {
	sel, err := selector(nb)
	if err != nil {
		return nodebudget.Request{}, err
	}
	r := nodebudget.Request{Budget: nb.Name, Node: node, ResourceVersion: version, Kind: kind, User: user}
	seen := false
	for _, n := range h.Nodes.Nodes(sel) {
		seen = seen || n.Name == node
		r.Nodes = append(r.Nodes, nodebudget.Node{Name: n.Name, ResourceVersion: n.ResourceVersion,
			Available: nodebudget.Available(n) || n.Name == node})
	}
	if !seen { // a node newer than the view
		r.Nodes = append(r.Nodes, nodebudget.Node{Name: node, Available: true})
	}
	return r, nil
}

func decode(raw []byte, into **corev1.Node) error {
	if len(raw) == 0 {
		return nil
	}
	*into = &corev1.Node{}
	if err := json.Unmarshal(raw, *into); err != nil {
		return fmt.Errorf("decoding the node: %w", err)
	}
	return nil
}

// selector is the budget's node selector; none selects every node.
func selector(nb *v1alpha1.NodeDisruptionBudget) (labels.Selector, error) {
	if nb.Spec.NodeSelector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(nb.Spec.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("nodeSelector: %w", err)
	}
	return sel, nil
}
