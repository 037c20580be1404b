// Package admit is the ChangeWindow protection as the API server sees it:
// its webhook (plugin.go), its handler (handler.go), its Ready condition
// (ready.go). The decision itself is the parent package.
package admit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/changewindow"
)

// Prefix serves each ChangeWindow's webhook, followed by
// NAMESPACE/NAME.
const Prefix = "/validate/window/"

// SpecPath validates ChangeWindows themselves: what CEL cannot check
// (cron schedules that parse and ever fire).
const SpecPath = "/validate/changewindow"

// overrides counts emergency overrides of change windows.
var overrides = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_changewindow_overrides_total",
	Help: "Changes let through outside a ChangeWindow by an emergency override, by window.",
}, []string{"namespace", "window"})

func init() { metrics.Registry.MustRegister(overrides) }

// Windows decides writes to objects a ChangeWindow covers.
type Windows struct {
	Reader client.Reader
	// Live reads a window the cache does not hold yet (its webhook is
	// called before the watch delivered it); nil trusts the cache.
	Live     client.Reader
	Recorder events.EventRecorder
	// Clock is the time windows are decided at; nil is the real clock.
	Clock clock.PassiveClock
	// Mapper names resources as discovery does in denials; nil guesses.
	Mapper meta.RESTMapper

	mu       sync.Mutex
	compiled map[types.UID]compiledWindow
	// recorded remembers overrides lately recorded, by window, object and
	// reason: the API server may ask again about the same write (it
	// re-runs admission when a concurrent write forces a retry), and one
	// override is one record.
	recorded map[string]time.Time
}

// firstRecord says whether an override has not been recorded lately, and
// notes it.
func (h *Windows) firstRecord(key string, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.recorded[key]; ok && now.Sub(t) < 2*time.Minute {
		return false
	}
	if h.recorded == nil || len(h.recorded) > 10000 {
		h.recorded = map[string]time.Time{}
	}
	h.recorded[key] = now
	return true
}

type compiledWindow struct {
	generation int64
	window     *changewindow.Window
}

var _ admission.Handler = (*Windows)(nil)

// compile caches compiled windows by generation: loading a time zone is
// not free, and a webhook is on every write's path.
func (h *Windows) compile(cw *v1alpha1.ChangeWindow) (*changewindow.Window, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.compiled[cw.UID]; ok && c.generation == cw.Generation {
		return c.window, nil
	}
	w, err := changewindow.Compile(cw.Spec, rampartadmission.ClockOrReal(h.Clock).Now())
	if err != nil {
		return nil, err
	}
	if h.compiled == nil {
		h.compiled = map[types.UID]compiledWindow{}
	}
	h.compiled[cw.UID] = compiledWindow{generation: cw.Generation, window: w}
	return w, nil
}

// Handle implements admission.Handler.
func (h *Windows) Handle(ctx context.Context, req admission.Request) admission.Response {
	ns, name, ok := strings.Cut(windowName(ctx), "/")
	if !ok {
		return admission.Allowed("")
	}
	cw := &v1alpha1.ChangeWindow{}
	err := h.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cw)
	if apierrors.IsNotFound(err) && h.Live != nil {
		err = h.Live.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cw)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return admission.Allowed("") // the window is gone; its webhook soon too
		}
		return admission.Errored(http.StatusServiceUnavailable, err)
	}
	if !coversOperation(cw, req.Operation) {
		return admission.Allowed("")
	}
	w, err := h.compile(cw)
	if err != nil {
		// A window the API accepted but that cannot be evaluated fails closed
		// and says why.
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("ChangeWindow %s/%s: %w", ns, name, err))
	}
	var old, cur unstructured.Unstructured
	if len(req.OldObject.Raw) > 0 {
		if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
	}
	if len(req.Object.Raw) > 0 {
		if err := cur.UnmarshalJSON(req.Object.Raw); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
	}
	if old.Object == nil {
		old.Object = map[string]any{}
	}
	if cur.Object == nil {
		cur.Object = map[string]any{}
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	subject := &cur
	if req.Operation == admissionv1.Delete {
		subject = &old
	}
	r := changewindow.Request{
		Object:      protection.Object{Resource: gr, Namespace: req.Namespace, Name: subject.GetName(), Singular: protection.Singular(h.Mapper, gr)},
		Window:      name,
		Changed:     changewindow.Changed(old.Object, cur.Object, cw.Spec.Fields),
		MayOverride: protection.Names(cw.Spec.Override, req.UserInfo),
		Requester:   req.UserInfo.Username,
	}
	// The override counts only when this request sets it: a reason left on
	// the object from an earlier emergency does not open the window again.
	if reason := cur.GetAnnotations()[v1alpha1.AnnotationChangeOverride]; reason != old.GetAnnotations()[v1alpha1.AnnotationChangeOverride] {
		r.Override = reason
	}
	// The API server may have given up on this request (its webhook
	// timeout); then nobody reads the verdict.
	if err := ctx.Err(); err != nil {
		return admission.Errored(http.StatusServiceUnavailable, err)
	}
	now := rampartadmission.ClockOrReal(h.Clock).Now()
	v := changewindow.Decide(r, w, now)
	kind := schema.GroupVersionKind(req.Kind)
	if changewindow.Overridden(v) {
		if !rampartadmission.DryRun(req) && h.firstRecord(ns+"/"+name+"/"+string(subject.GetUID())+"/"+r.Override, now) {
			overrides.WithLabelValues(ns, name).Inc()
			if h.Recorder != nil {
				h.Recorder.Eventf(&corev1.ObjectReference{APIVersion: kind.GroupVersion().String(), Kind: kind.Kind,
					Namespace: r.Namespace, Name: r.Name, UID: subject.GetUID()},
					nil, corev1.EventTypeWarning, "ChangeOverride", "Override", "%s", v.Message)
			}
		}
		return admission.Allowed("").WithWarnings("rampart: " + v.Message + " (recorded)")
	}
	return rampartadmission.Respond(h.Recorder, req, rampartadmission.About{Kind: kind, Object: r.Object, UID: subject.GetUID(), Action: "Change"}, v)
}

func coversOperation(cw *v1alpha1.ChangeWindow, op admissionv1.Operation) bool {
	ops := cw.Spec.Operations
	if len(ops) == 0 {
		ops = []v1alpha1.WindowOperation{"UPDATE"}
	}
	for _, o := range ops {
		if string(o) == string(op) {
			return true
		}
	}
	return false
}

type windowKey struct{}

// FromPath passes the NAMESPACE/NAME after Prefix to Handle.
func FromPath(ctx context.Context, r *http.Request) context.Context {
	if rest, ok := strings.CutPrefix(r.URL.Path, Prefix); ok {
		return context.WithValue(ctx, windowKey{}, rest)
	}
	return ctx
}

func windowName(ctx context.Context) string {
	s, _ := ctx.Value(windowKey{}).(string)
	return s
}
