package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/flowcontrol"
	"github.com/rampart-io/rampart/internal/protection"
)

// FlowControlPrefix serves each DeletionFlowControl's webhook, followed by
// its name.
const FlowControlPrefix = "/validate/flowcontrol/"

var (
	trips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_flowcontrol_trips_total",
		Help: "Times a DeletionFlowControl's breaker tripped.",
	}, []string{"name"})
	flowDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_flowcontrol_decisions_total",
		Help: "Deletes a DeletionFlowControl judged, by outcome (admitted, denied, exempt, dryrun).",
	}, []string{"name", "outcome"})
)

func init() { metrics.Registry.MustRegister(trips, flowDecisions) }

// PodLabels reads a cached pod's labels (for evictions, whose requests
// carry no pod).
type PodLabels interface {
	PodLabels(namespace, name string) (map[string]string, bool)
}

// FlowControl counts and limits deletes for DeletionFlowControls. Every
// admitted delete is written to the flow control's status with optimistic
// concurrency before it is admitted: the count is exact across replicas
// and survives restarts.
type FlowControl struct {
	// Client reads and writes DeletionFlowControls directly (not from a
	// cache: the count must be the latest).
	Client   client.Client
	Pods     PodLabels
	Recorder events.EventRecorder
	Now      func() time.Time

	mu sync.Mutex
	// counted remembers, per flow control, the objects whose delete this
	// replica admitted lately. The API server may ask again about the same
	// DELETE (it re-runs admission when a concurrent write forces a retry);
	// counting it twice, or denying the retry after admitting the first
	// ask, would be wrong. A retry sent to another replica is counted again:
	// conservative, never over the limit.
	counted map[string]map[string]time.Time
	written latest[*v1alpha1.DeletionFlowControl]
}

// recountAfter is how long an admitted object's delete is not counted again.
const recountAfter = 2 * time.Minute

func (h *FlowControl) seen(name, key string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.counted[name][key]
	return ok && now.Sub(t) < recountAfter
}

func (h *FlowControl) remember(name, key string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counted == nil {
		h.counted = map[string]map[string]time.Time{}
	}
	m := h.counted[name]
	if m == nil {
		m = map[string]time.Time{}
		h.counted[name] = m
	}
	if len(m) > 10000 {
		for k, t := range m {
			if now.Sub(t) >= recountAfter {
				delete(m, k)
			}
		}
	}
	m[key] = now
}

var _ admission.Handler = (*FlowControl)(nil)

// Handle implements admission.Handler.
func (h *FlowControl) Handle(ctx context.Context, req admission.Request) admission.Response {
	name, ok := policyName(ctx)
	if !ok {
		return admission.Allowed("")
	}
	obj := protection.Object{Namespace: req.Namespace, Name: req.Name}
	obj.Resource.Group, obj.Resource.Resource = req.Resource.Group, req.Resource.Resource
	var objLabels map[string]string
	key := req.Namespace + "/" + req.Name
	switch {
	case req.Operation == admissionv1.Delete:
		var old unstructured.Unstructured
		if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		obj.Name, objLabels, key = old.GetName(), old.GetLabels(), string(old.GetUID())
	case req.Operation == admissionv1.Create && req.SubResource == "eviction":
		if h.Pods != nil {
			objLabels, _ = h.Pods.PodLabels(req.Namespace, req.Name)
		}
	default:
		return admission.Allowed("")
	}
	if !dryRun(req) && h.seen(name, key, h.now()) {
		return admission.Allowed("") // the same delete, asked again
	}
	lock := h.written.lock(name)
	lock.Lock()
	defer lock.Unlock()
	deadline := time.Now().Add(8 * time.Second) // inside the webhook's 10 s timeout
	for attempt := 0; ; attempt++ {
		// Start from the version this replica wrote last: if nobody wrote
		// since, the update succeeds without a read; if somebody did, it
		// conflicts and the next attempt reads the latest.
		dfc, ok := h.written.get(name)
		if !ok || attempt > 0 {
			dfc = &v1alpha1.DeletionFlowControl{}
			if err := h.Client.Get(ctx, client.ObjectKey{Name: name}, dfc); err != nil {
				if apierrors.IsNotFound(err) {
					h.written.forget(name)
					return admission.Allowed("")
				}
				return admission.Errored(http.StatusServiceUnavailable, err)
			}
		}
		if req.SubResource == "eviction" && dfc.Spec.CountEvictions != nil && !*dfc.Spec.CountEvictions {
			return admission.Allowed("")
		}
		if exempt(dfc, req, objLabels) {
			flowDecisions.WithLabelValues(name, "exempt").Inc()
			return admission.Allowed("")
		}
		st := dfc.Status.DeepCopy()
		v, err := flowcontrol.Admit(flowcontrol.Request{Name: name, Spec: dfc.Spec, Requester: req.UserInfo.Username,
			Object: obj.Describe()}, st, h.now())
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		if dryRun(req) {
			// Judged, never counted.
			if v.Allowed {
				return admission.Allowed("")
			}
			return admission.Denied(v.Message)
		}
		flowcontrol.SyncCondition(st, dfc.Generation)
		dfc.Status = *st
		err = h.Client.Status().Update(ctx, dfc)
		if err == nil {
			h.written.set(name, dfc)
		}
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && time.Now().Before(deadline) {
			// Another replica counted first: read again and judge again.
			time.Sleep(time.Duration(rand.IntN(5*(attempt+1))) * time.Millisecond)
			continue
		}
		if err != nil {
			return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("recording the delete in DeletionFlowControl %s: %w", name, err))
		}
		if v.Tripped {
			trips.WithLabelValues(name).Inc()
			if h.Recorder != nil {
				h.Recorder.Eventf(dfc, nil, corev1.EventTypeWarning, "BreakerTripped", "Trip", "%s", v.Message)
			}
		}
		switch {
		case dfc.Spec.Mode == v1alpha1.FlowDryRun:
			flowDecisions.WithLabelValues(name, "dryrun").Inc()
			if v.Tripped {
				return admission.Allowed("").WithWarnings("rampart (DryRun): " + v.Message)
			}
			return admission.Allowed("")
		case v.Allowed:
			flowDecisions.WithLabelValues(name, "admitted").Inc()
			h.remember(name, key, h.now())
			return admission.Allowed("")
		default:
			flowDecisions.WithLabelValues(name, "denied").Inc()
			denials.WithLabelValues(v.Rule, obj.Resource.String()).Inc()
			return admission.Denied(v.Message)
		}
	}
}

func (h *FlowControl) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
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

// FlowControlFromPath passes the flow control named after
// FlowControlPrefix to Handle.
func FlowControlFromPath(ctx context.Context, r *http.Request) context.Context {
	if name, ok := strings.CutPrefix(r.URL.Path, FlowControlPrefix); ok && name != "" {
		return context.WithValue(ctx, policyKey{}, name)
	}
	return ctx
}
