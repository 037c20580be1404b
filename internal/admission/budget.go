package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/budget"
	"github.com/rampart-io/rampart/internal/protection"
)

// Webhook paths of PodUnavailableBudgets.
const (
	// BudgetPath judges pod deletes, evictions, in-place updates and resizes.
	BudgetPath = "/validate/budgets"
	// BudgetCoverPath labels new pods that a budget covers.
	BudgetCoverPath = "/mutate/budgets"
)

// RuleBudget names budget denials in metrics and Events.
const RuleBudget = "PodUnavailableBudget"

var budgetDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_budget_decisions_total",
	Help: "Pod disruptions judged by PodUnavailableBudgets, by operation and outcome (admitted, denied, dryrun).",
}, []string{"operation", "outcome"})

func init() { metrics.Registry.MustRegister(budgetDecisions) }

// Budgets judges every disruption of a pod against every budget that
// covers it. An admitted disruption is written into each budget's status
// (the pod, with the time) with optimistic concurrency before it is
// admitted, so that replicas never admit more than a budget allows between
// them; the status controller returns it once the pod is seen unavailable
// or after a timeout.
type Budgets struct {
	// Client reads and writes budgets directly: the latest status decides
	// every denial and every write.
	Client client.Client
	// Cache, the manager's informer cache, is where a judgement starts.
	Cache client.Reader
	Index *budget.Index
	// Pods are cached pods, for evictions (their requests carry no pod).
	Pods PodLabels
	// Namespaces says which namespaces are being deleted: their pods go
	// with them, whatever the budgets (a namespace is protected by its
	// own rampart.io/protection label).
	Namespaces interface{ NamespaceTerminating(string) bool }
	Recorder   events.EventRecorder
	Now        func() time.Time

	written latest[*v1alpha1.PodUnavailableBudget]
}

var _ admission.Handler = (*Budgets)(nil)

// disruption reads what a request does to which pod; ok is false for a
// request that disrupts nothing (a label change, a pod already going).
func (h *Budgets) disruption(req admission.Request) (r budget.Request, podLabels map[string]string, ok bool, err error) {
	r = budget.Request{Namespace: req.Namespace, Pod: req.Name}
	decode := func(raw []byte) (*corev1.Pod, error) {
		p := &corev1.Pod{}
		return p, json.Unmarshal(raw, p)
	}
	switch {
	case req.Operation == admissionv1.Delete && req.SubResource == "":
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return r, nil, false, err
		}
		r.Pod, r.Op, r.Verb = old.Name, v1alpha1.DisruptDelete, "delete"
		// The old object of a graceful delete already carries the deletion
		// timestamp this very request sets: whether the pod was going
		// before is the cache's to say.
		cached, found := h.Index.Pod(req.Namespace, old.Name)
		gone := (found && cached.Gone) || old.Status.Phase == corev1.PodSucceeded || old.Status.Phase == corev1.PodFailed
		return r, old.Labels, !gone, nil
	case req.Operation == admissionv1.Create && req.SubResource == "eviction":
		r.Op, r.Verb = v1alpha1.DisruptEvict, "evict"
		// An eviction's dry run is in its body (kubectl drain
		// --dry-run=server), not in the request's options.
		var ev policyv1.Eviction
		if err := json.Unmarshal(req.Object.Raw, &ev); err != nil {
			return r, nil, false, err
		}
		r.DryRun = ev.DeleteOptions != nil && slices.Contains(ev.DeleteOptions.DryRun, metav1.DryRunAll)
		if p, found := h.Index.Pod(req.Namespace, req.Name); found {
			return r, p.Labels, !p.Gone, nil
		}
		if h.Pods != nil {
			l, found := h.Pods.PodLabels(req.Namespace, req.Name)
			return r, l, found, nil
		}
		return r, nil, false, nil
	case req.Operation == admissionv1.Update && (req.SubResource == "" || req.SubResource == "resize"):
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return r, nil, false, err
		}
		cur, err := decode(req.Object.Raw)
		if err != nil {
			return r, nil, false, err
		}
		if req.SubResource == "resize" {
			r.Op, r.Verb = v1alpha1.DisruptResize, "resize"
			return r, old.Labels, budget.ResourcesDiffer(old, cur), nil
		}
		r.Op, r.Verb = v1alpha1.DisruptUpdate, "update"
		return r, old.Labels, budget.RestartsContainers(old, cur), nil
	}
	return r, nil, false, nil
}

// Handle implements admission.Handler.
func (h *Budgets) Handle(ctx context.Context, req admission.Request) admission.Response {
	r, podLabels, disrupts, err := h.disruption(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !disrupts || (r.Op == v1alpha1.DisruptDelete && h.Namespaces != nil && h.Namespaces.NamespaceTerminating(req.Namespace)) {
		return admission.Allowed("")
	}
	keys := h.Index.Covering(req.Namespace, podLabels)
	if len(keys) == 0 {
		return admission.Allowed("")
	}
	now := h.now()
	var consumed []budget.Key
	for _, k := range keys {
		ok, message, took, err := h.consume(ctx, k, r, r.DryRun || dryRun(req), now)
		if took {
			consumed = append(consumed, k)
		}
		if err == nil && ok {
			continue
		}
		// All budgets must agree: give back what this request took.
		for _, c := range consumed {
			h.giveBack(ctx, c, r.Pod, now)
		}
		if err != nil {
			return admission.Errored(http.StatusServiceUnavailable, err)
		}
		budgetDecisions.WithLabelValues(string(r.Op), "denied").Inc()
		o := protection.Object{Namespace: req.Namespace, Name: r.Pod}
		o.Resource.Resource = "pods"
		rec := h.Recorder
		if r.DryRun {
			rec = nil // a dry run leaves no Event
		}
		deny(rec, req, corev1.SchemeGroupVersion.WithKind("Pod"), o, types.UID(h.podUID(req)), RuleBudget, "Disruption", message)
		// 429, as the Eviction API answers for a PodDisruptionBudget:
		// kubectl drain and controllers retry it.
		resp := admission.Denied(message)
		resp.Result.Code = http.StatusTooManyRequests
		resp.Result.Reason = metav1.StatusReasonTooManyRequests
		return resp
	}
	outcome := "admitted"
	if r.DryRun || dryRun(req) {
		outcome = "dryrun"
	}
	budgetDecisions.WithLabelValues(string(r.Op), outcome).Inc()
	return admission.Allowed("")
}

func (h *Budgets) podUID(req admission.Request) (uid string) {
	var m metav1.PartialObjectMetadata
	if json.Unmarshal(req.OldObject.Raw, &m) == nil {
		return string(m.UID)
	}
	return ""
}

// consume judges the disruption against one budget and, if admitted and
// not a dry run, records it in the budget's status. took says whether it
// was recorded (and must be given back if another budget denies).
func (h *Budgets) consume(ctx context.Context, k budget.Key, r budget.Request, dry bool, now time.Time) (ok bool, message string, took bool, err error) {
	lock := h.written.lock(k.String())
	lock.Lock()
	defer lock.Unlock()
	deadline := time.Now().Add(8 * time.Second) // inside the webhook's 10 s timeout
	latest := false
	for attempt := 0; ; attempt++ {
		b, stale, err := h.read(ctx, k, latest)
		if apierrors.IsNotFound(err) {
			h.written.forget(k.String())
			return true, "", false, nil // deleted since: it guards nothing
		}
		if err != nil {
			return false, "", false, fmt.Errorf("reading PodUnavailableBudget %s: %w", k, err)
		}
		v := budget.Judge(b, r)
		if !v.Allowed && stale {
			// A cached copy lags the status controller, which returns
			// disruptions and counts pods that became Ready: deny only on
			// the latest.
			latest = true
			continue
		}
		if !v.Allowed || !v.Consume || dry {
			return v.Allowed, v.Message, false, nil
		}
		budget.Consume(&b.Status, r.Pod, now)
		err = h.Client.Status().Update(ctx, b)
		if err == nil {
			h.written.set(k.String(), b)
			return true, "", true, nil
		}
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && time.Now().Before(deadline) {
			// Another replica (or the status controller) wrote first:
			// read again and judge again.
			latest = true
			time.Sleep(time.Duration(rand.IntN(5*(attempt+1))) * time.Millisecond)
			continue
		}
		return false, "", false, fmt.Errorf("recording the disruption in PodUnavailableBudget %s: %w", k, err)
	}
}

// read is the budget to judge on. Unless latest is asked for, it is the
// copy this replica wrote last or the informer's (stale says so): an
// admission then costs no read, and a write from a stale copy conflicts
// and is retried on the latest.
func (h *Budgets) read(ctx context.Context, k budget.Key, latest bool) (b *v1alpha1.PodUnavailableBudget, stale bool, err error) {
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.Name}
	if !latest {
		if b, ok := h.written.get(k.String()); ok {
			return b, true, nil
		}
		if h.Cache != nil {
			b = &v1alpha1.PodUnavailableBudget{}
			if h.Cache.Get(ctx, key, b) == nil {
				return b, true, nil
			}
		}
	}
	b = &v1alpha1.PodUnavailableBudget{}
	return b, false, h.Client.Get(ctx, key, b)
}

// giveBack removes a disruption this request recorded, when another budget
// denied it. If that fails, the status controller returns it after the
// disruption timeout.
func (h *Budgets) giveBack(ctx context.Context, k budget.Key, pod string, at time.Time) {
	lock := h.written.lock(k.String())
	lock.Lock()
	defer lock.Unlock()
	for range 5 {
		b := &v1alpha1.PodUnavailableBudget{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, b); err != nil {
			return
		}
		if t, ok := b.Status.Disruptions[pod]; !ok || !t.Time.Equal(metav1.NewTime(at).Rfc3339Copy().Time) {
			return
		}
		delete(b.Status.Disruptions, pod)
		b.Status.UnavailableAllowed++
		if err := h.Client.Status().Update(ctx, b); err == nil {
			h.written.set(k.String(), b)
			return
		} else if !apierrors.IsConflict(err) {
			return
		}
	}
}

func (h *Budgets) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// BudgetCover labels a new pod rampart.io/pub-covered=true when a budget
// covers it, so that the disruption webhooks, which select on that label,
// are called for it. Its failure policy is Ignore: a pod created while
// Rampart is down is labelled by the controller afterwards.
type BudgetCover struct {
	Index *budget.Index
}

// Handle implements admission.Handler.
func (h *BudgetCover) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed("")
	}
	var m metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &m); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if m.Labels[v1alpha1.LabelPUBCovered] == "true" || len(h.Index.Covering(req.Namespace, m.Labels)) == 0 {
		return admission.Allowed("")
	}
	patch := []map[string]any{}
	if m.Labels == nil {
		patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{}})
	}
	patch = append(patch, map[string]any{"op": "add", "path": "/metadata/labels/rampart.io~1pub-covered", "value": "true"})
	raw, err := json.Marshal(patch)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: true, Patch: raw, PatchType: &pt}}
}
