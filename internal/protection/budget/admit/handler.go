// Package admit is the PodUnavailableBudget protection as the API server
// sees it: its webhooks (plugin.go), its handler (handler.go), the
// admission of new budgets (admission.go) and of workloads asking for a
// generated one (generated.go). The decision itself is the parent package.
package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// Webhook paths of PodUnavailableBudgets.
const (
	// Path decides pod deletes, evictions, in-place updates and resizes.
	Path = "/validate/budgets"
)

var budgetDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_budget_decisions_total",
	Help: "Pod disruptions judged by PodUnavailableBudgets, by operation and outcome (admitted, denied, dryrun; unavailable: a pod already unavailable, admitted at no cost; ownergone: a delete of a pod whose controller is gone or being deleted, the garbage collector's; jobcontroller: the Job controller removing its Job's pods; scaledown: a workload's controller removing the pods a scale-down left over).",
}, []string{"operation", "outcome"})

func init() { metrics.Registry.MustRegister(budgetDecisions) }

// Budgets decides every disruption of a pod against every budget that
// covers it. An admitted disruption is written into each budget's status
// (the pod, with the time) with optimistic concurrency before it is
// admitted, so that replicas never admit more than a budget allows between
// them; the status controller returns it once the pod is seen unavailable
// or after a timeout.
type Budgets struct {
	// Client reads and writes budgets directly: the latest status decides
	// every denial and every write.
	Client client.Client
	// Cache, the manager's informer cache, is where a decision starts.
	Cache client.Reader
	Index *budget.Index
	// Pods are cached pods, for evictions (their requests carry no pod).
	Pods rampartadmission.PodLabels
	// Namespaces says which namespaces are being deleted: their pods go
	// with them, whatever the budgets (a namespace is protected by its
	// own rampart.io/protection label).
	Namespaces interface{ NamespaceTerminating(string) bool }
	Recorder   events.EventRecorder
	// Clock is the time disruptions are recorded at; nil is the real clock.
	Clock clock.PassiveClock
	// Targets resolves the pod selector of a targetRef budget the index
	// has not filed yet (its status.selector is not written yet); nil
	// treats such a budget as covering every pod of its namespace.
	Targets TargetSelector
	// Nodes says which nodes are NotReady or unreachable: a pod there is
	// already unavailable, and many of a budget's nodes at once are a
	// partition. nil treats every node as Ready.
	Nodes rampartadmission.NodeHealth
	// PartitionThreshold is the share of a budget's nodes NotReady at
	// once that makes a partition (0: budget.DefaultPartitionThreshold).
	PartitionThreshold float64
	// Owners says whether a pod's controller is alive; nil judges the
	// deletes of pods whose owner is gone like any other.
	Owners rampartadmission.OwnerView

	// Marks bring the index up to date in namespaces that have change
	// marks (see budget.MarksName), with one read; nil, or a namespace
	// without marks, goes through Fence or lists.
	Marks *Marks
	// Fence brings the index up to date in namespaces holding
	// Index.FenceAbove budgets or more; nil lists them live always.
	Fence *Fence

	written ledger.Lazy[*v1alpha1.PodUnavailableBudget]
}

// TargetSelector resolves a budget's targetRef into its pod selector
// (the workload's scale subresource).
type TargetSelector interface {
	TargetSelector(ctx context.Context, namespace string, t *v1alpha1.TargetReference) (string, error)
}

var _ admission.Handler = (*Budgets)(nil)

// jobController are the names the Job controller acts under: its own
// service account (kube-controller-manager --use-service-account-credentials,
// the default of kubeadm and most distributions), or the manager's shared
// identity.
var jobController = []string{"system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager"}

// scaleController are the names the controllers that scale pods down act
// under (as jobController).
var scaleController = []string{"system:serviceaccount:kube-system:replicaset-controller",
	"system:serviceaccount:kube-system:replication-controller", "system:serviceaccount:kube-system:statefulset-controller",
	"system:kube-controller-manager"}

// disrupted is what a decision reads of the disrupted pod.
type disrupted struct {
	labels map[string]string
	// owner is the pod's controller, for deletes.
	owner *metav1.OwnerReference
	// node is the pod's node; ready its Ready condition (false without
	// one: a pod not started yet). A pod known only by its labels is
	// decided as a Ready one.
	node  string
	ready bool
	// uid and created are the pod's, empty if unknown.
	uid     string
	created time.Time
	// terminating marks the pod of an eviction that is going already.
	terminating bool
}

func disruptedPod(p *corev1.Pod) disrupted {
	return disrupted{labels: p.Labels, node: p.Spec.NodeName, ready: podReady(p), uid: string(p.UID), created: p.CreationTimestamp.Time}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// disruption reads what a request does to which pod; ok is false for a
// request that disrupts nothing (a label change, a pod already going).
func (h *Budgets) disruption(ctx context.Context, req admission.Request) (r budget.Request, pod disrupted, ok bool, err error) {
	r = budget.Request{Namespace: req.Namespace, Pod: req.Name}
	decode := func(raw []byte) (*corev1.Pod, error) {
		p := &corev1.Pod{}
		return p, json.Unmarshal(raw, p)
	}
	switch {
	case req.Operation == admissionv1.Delete && req.SubResource == "":
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return r, pod, false, err
		}
		r.Pod, r.Op, r.Verb = old.Name, v1alpha1.DisruptDelete, "delete"
		// The old object of a graceful delete already carries the deletion
		// timestamp this very request sets: whether the pod was going
		// before is the cache's to say.
		cached, found := h.Index.Pod(req.Namespace, old.Name)
		// The same pod, not the one a StatefulSet's new pod replaced under
		// its name, still terminating in the cache.
		same := found && cached.UID == string(old.UID)
		gone := (same && cached.Gone) || old.Status.Phase == corev1.PodSucceeded || old.Status.Phase == corev1.PodFailed
		pod := disruptedPod(old)
		pod.owner = metav1.GetControllerOf(old)
		return r, pod, !gone, nil
	case req.Operation == admissionv1.Create && req.SubResource == "eviction":
		r.Op, r.Verb = v1alpha1.DisruptEvict, "evict"
		// An eviction's dry run is in its body (kubectl drain
		// --dry-run=server), not in the request's options.
		var ev policyv1.Eviction
		if err := json.Unmarshal(req.Object.Raw, &ev); err != nil {
			return r, pod, false, err
		}
		r.DryRun = ev.DeleteOptions != nil && slices.Contains(ev.DeleteOptions.DryRun, metav1.DryRunAll)
		p, found := h.Index.Pod(req.Namespace, req.Name)
		if found && !p.Gone && p.Ready {
			return r, disrupted{labels: p.Labels, node: p.Node, ready: p.Ready, uid: p.UID, created: p.Created}, true, nil
		}
		// Not Ready in the cache, which would let it go free: it may have
		// turned Ready a moment ago, and an eviction carries no pod to
		// tell. The API server's copy decides, as below.
		// Going, in the cache: but an eviction names no UID, and a
		// StatefulSet's new pod takes the name of the one going. Only the
		// API server can tell: read it below.
		if h.Pods != nil && !found {
			// Known by its labels only: decided as a Ready pod.
			if l, found := h.Pods.PodLabels(req.Namespace, req.Name); found {
				return r, disrupted{labels: l, ready: true}, true, nil
			}
		}
		// A pod created a moment ago may not be cached yet: ask the API
		// server rather than let its eviction through undecided.
		live := &corev1.Pod{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, live); err != nil {
			if apierrors.IsNotFound(err) {
				return r, pod, false, nil
			}
			return r, pod, false, fmt.Errorf("reading pod %s/%s: %w", req.Namespace, req.Name, err)
		}
		if live.DeletionTimestamp != nil {
			// Going already: this eviction would pass as a no-op, but it is
			// carried out by name after this answer, and a StatefulSet's
			// new pod may have taken the name by then (seen on a loaded
			// API server: 1.5 s between the answer and the eviction). It
			// is decided, and refused while the pod is going (see Handle).
			pod := disruptedPod(live)
			pod.terminating = true
			return r, pod, true, nil
		}
		gone := live.Status.Phase == corev1.PodSucceeded || live.Status.Phase == corev1.PodFailed
		return r, disruptedPod(live), !gone, nil
	case req.Operation == admissionv1.Update && (req.SubResource == "" || req.SubResource == "resize"):
		old, err := decode(req.OldObject.Raw)
		if err != nil {
			return r, pod, false, err
		}
		cur, err := decode(req.Object.Raw)
		if err != nil {
			return r, pod, false, err
		}
		if req.SubResource == "resize" {
			r.Op, r.Verb = v1alpha1.DisruptResize, "resize"
			return r, disruptedPod(old), budget.ResourcesDiffer(old, cur), nil
		}
		r.Op, r.Verb = v1alpha1.DisruptUpdate, "update"
		return r, disruptedPod(old), budget.RestartsContainers(old, cur), nil
	}
	return r, pod, false, nil
}

// unavailable says why a pod is already unavailable, "" if it is not: not
// Ready, or on a node that is NotReady or unreachable (whose pods the node
// lifecycle controller has not marked yet).
func (h *Budgets) unavailable(p disrupted) string {
	if h.Nodes != nil && p.node != "" {
		if why := h.Nodes.NodeUnavailable(p.node); why != "" {
			return fmt.Sprintf("its node %s is %s", p.node, why)
		}
	}
	if !p.ready {
		return "it is not Ready"
	}
	return ""
}

// ownerGone says whether a pod's controller is gone or being deleted:
// from the cache when it has the owner alive (the common case, and the
// fast one), confirmed live otherwise (a cache behind a new ReplicaSet
// must not free its healthy pods). Any doubt answers false.
func (h *Budgets) ownerGone(ctx context.Context, ns string, ref metav1.OwnerReference) bool {
	if h.Owners == nil {
		return false
	}
	if alive, known := h.Owners.OwnerAlive(ns, ref); alive && known {
		return false
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind+"List"))
	if err := h.Client.List(ctx, list, client.InNamespace(ns), client.MatchingFields{"metadata.name": ref.Name}); err != nil {
		return false
	}
	for _, o := range list.Items {
		if o.UID == ref.UID && o.DeletionTimestamp == nil {
			return false
		}
	}
	return true
}

// nodes counts the nodes a budget's pods run on, and those of them that
// are NotReady or unreachable.
func (h *Budgets) nodes(k budget.Key) budget.NodeCount {
	var n budget.NodeCount
	pods, _ := h.Index.Pods(k)
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		if p.Node == "" || seen[p.Node] {
			continue
		}
		seen[p.Node] = true
		n.Total++
		if h.Nodes != nil && h.Nodes.NodeUnavailable(p.Node) != "" {
			n.NotReady++
		}
	}
	return n
}

// Handle implements admission.Handler.
func (h *Budgets) Handle(ctx context.Context, req admission.Request) admission.Response {
	r, pod, disrupts, err := h.disruption(ctx, req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !disrupts || (r.Op == v1alpha1.DisruptDelete && h.Namespaces != nil && h.Namespaces.NamespaceTerminating(req.Namespace)) {
		return admission.Allowed("")
	}
	keys, err := h.covering(ctx, req.Namespace, pod.labels)
	if err != nil {
		return admission.Errored(http.StatusServiceUnavailable, err)
	}
	if len(keys) == 0 {
		return admission.Allowed("")
	}
	if pod.terminating {
		budgetDecisions.WithLabelValues(string(r.Op), "denied").Inc()
		o := protection.Object{Namespace: req.Namespace, Name: r.Pod}
		o.Resource.Resource = "pods"
		return rampartadmission.Respond(h.Recorder, req, rampartadmission.About{Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Object: o,
			UID: types.UID(h.podUID(req)), Action: "Disruption", DryRun: r.DryRun}, budget.Terminating(r, keys))
	}
	if r.Op == v1alpha1.DisruptDelete && pod.owner != nil && h.ownerGone(ctx, req.Namespace, *pod.owner) {
		// The garbage collector removing what a deleted workload left:
		// the workload's delete was the decision (judged by deletion
		// protection), its pods go with it, as in a terminating
		// namespace.
		budgetDecisions.WithLabelValues(string(r.Op), "ownergone").Inc()
		return admission.Allowed("")
	}
	if r.Op == v1alpha1.DisruptDelete && pod.owner != nil && slices.Contains(scaleController, req.UserInfo.Username) &&
		h.Owners != nil && h.Owners.Surplus(req.Namespace, *pod.owner, r.Pod) {
		// A workload scaled down (by a user or a HorizontalPodAutoscaler)
		// removing the pods it no longer wants: the scale was the
		// decision (judged by rampart.io/explicit-replicas), and a
		// grouped budget, which sizes each group by the pods it has,
		// would otherwise hold the scale-down to one pod per group at a
		// time (do no harm: HPA). A rollout's deletes stay judged.
		budgetDecisions.WithLabelValues(string(r.Op), "scaledown").Inc()
		return admission.Allowed("")
	}
	if r.Op == v1alpha1.DisruptDelete && pod.owner != nil && pod.owner.Kind == "Job" && pod.owner.APIVersion == "batch/v1" &&
		slices.Contains(jobController, req.UserInfo.Username) {
		// The Job controller removing its own Job's pods: parallelism
		// lowered, the Job suspended (Kueue preempting it), or ended by
		// its deadline, backoff limit or policies. The Job's spec decided
		// it; and a refused delete of a Job past its deadline is retried
		// for ever, as the controller declares the Job failed only once
		// its pods are gone (do no harm).
		budgetDecisions.WithLabelValues(string(r.Op), "jobcontroller").Inc()
		return admission.Allowed("")
	}
	now := rampartadmission.ClockOrReal(h.Clock).Now()
	r.Unavailable = h.unavailable(pod)
	r.UID, r.Created = pod.uid, pod.created
	var consumed []budget.Key
	paid := false // some budget decided it at a cost (not free as unavailable)
	for _, k := range keys {
		if r.Unavailable != "" {
			r.Nodes = h.nodes(k)
		}
		v, took, err := h.consume(ctx, k, r, pod, r.DryRun || rampartadmission.DryRun(req), now, &paid)
		if took {
			consumed = append(consumed, k)
		}
		if err == nil && v.Allowed {
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
		return rampartadmission.Respond(h.Recorder, req, rampartadmission.About{Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Object: o,
			UID: types.UID(h.podUID(req)), Action: "Disruption", DryRun: r.DryRun}, v)
	}
	outcome := "admitted"
	switch {
	case r.DryRun || rampartadmission.DryRun(req):
		outcome = "dryrun"
	case r.Unavailable != "" && !paid:
		outcome = "unavailable" // an unavailable pod, at no cost
	}
	budgetDecisions.WithLabelValues(string(r.Op), outcome).Inc()
	return admission.Allowed("")
}

// covering are the budgets that cover a pod with these labels: those the
// index has filed, and those of the namespace it has not filed as they are
// now — a budget created or changed a moment ago that this replica's
// informer has not delivered, or a targetRef whose selector the status
// controller has not written yet. A budget holds from the moment the API
// server accepts it, not from the moment this replica hears of it.
//
// So the index is first made as current as the API server, in one of three
// ways. The namespace's change marks (budget.MarksName), read live: one
// small read whatever the number of budgets, and nothing written. Without
// marks (no budget created or changed there since they were turned on), or
// if they cannot be read: in a namespace holding Index.FenceAbove budgets
// or more, a write of the fence and the wait for its event; else a live
// list of the namespace's budgets (metadata only), which costs in
// proportion to them (333 ms at 10,000). Each way names the budgets the
// index may lack, which are read and matched here.
func (h *Budgets) covering(ctx context.Context, ns string, podLabels map[string]string) ([]budget.Key, error) {
	if h.Marks != nil && h.Index.Marking() {
		if keys, unsure, found := h.Marks.covering(ctx, ns, podLabels); found {
			indexReads.WithLabelValues("marks").Inc()
			return h.withLive(ctx, ns, podLabels, keys, unsure)
		}
	}
	if h.Fence != nil && h.Index.Count(ns) >= h.Index.FenceAbove() {
		if err := h.Fence.Pass(ctx); err == nil {
			indexReads.WithLabelValues("fence").Inc()
			keys, unresolved := h.Index.CoveringUnresolved(ns, podLabels)
			return h.withLive(ctx, ns, podLabels, keys, unresolved)
		}
		// The fence could not be written (see rampart_budget_fence_writes_total):
		// the live list is slower, and as sure.
	}
	indexReads.WithLabelValues("list").Inc()
	keys, filed := h.Index.CoveringFiled(ns, podLabels)
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("PodUnavailableBudgetList"))
	if err := h.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing the PodUnavailableBudgets of namespace %s: %w", ns, err)
	}
	var unsure []string
	for _, m := range list.Items {
		if gen, ok := filed[m.Name]; (ok && gen == m.Generation) || m.DeletionTimestamp != nil || h.Index.IsOwn(ns, m.Name) {
			continue
		}
		// Not filed, or filed with a spec that has changed since: decide by
		// the budget as it is now.
		unsure = append(unsure, m.Name)
	}
	keys = slices.DeleteFunc(keys, func(k budget.Key) bool { return slices.Contains(unsure, k.Name) })
	return h.withLive(ctx, ns, podLabels, keys, unsure)
}

// withLive adds to keys those of the budgets named unsure (not in keys)
// that, read live, cover a pod with these labels; sorted.
func (h *Budgets) withLive(ctx context.Context, ns string, podLabels map[string]string, keys []budget.Key, unsure []string) ([]budget.Key, error) {
	for _, name := range unsure {
		covers, err := h.liveCovers(ctx, ns, name, podLabels)
		if err != nil {
			return nil, err
		}
		if covers {
			keys = append(keys, budget.Key{Namespace: ns, Name: name})
		}
	}
	slices.SortFunc(keys, func(a, b budget.Key) int { return strings.Compare(a.Name, b.Name) })
	return slices.Compact(keys), nil
}

// liveCovers reads budget ns/name from the API server and says whether it
// covers a pod with these labels (false if it is gone).
func (h *Budgets) liveCovers(ctx context.Context, ns, name string, podLabels map[string]string) (bool, error) {
	b := &v1alpha1.PodUnavailableBudget{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading PodUnavailableBudget %s/%s: %w", ns, name, err)
	}
	return h.unfiledCovers(ctx, b, podLabels)
}

// unfiledCovers says whether a budget the index has not filed covers a pod.
func (h *Budgets) unfiledCovers(ctx context.Context, b *v1alpha1.PodUnavailableBudget, podLabels map[string]string) (bool, error) {
	if t := b.Spec.TargetRef; t != nil && (b.Status.Selector == "" || b.Status.ObservedGeneration != b.Generation) {
		if h.Targets == nil {
			return true, nil
		}
		sel, err := h.Targets.TargetSelector(ctx, b.Namespace, b.Spec.TargetRef)
		if apierrors.IsNotFound(err) {
			return false, nil // no target: the budget covers nothing (see the status controller)
		}
		if err != nil {
			return false, fmt.Errorf("PodUnavailableBudget %s/%s: %w", b.Namespace, b.Name, err)
		}
		b = b.DeepCopy()
		b.Status.Selector = sel
	}
	covers, err := budget.CoversLabels(b, podLabels)
	// A selector that does not parse covers nothing, as in the index (the
	// status controller reports it).
	return covers && err == nil, nil
}

func (h *Budgets) podUID(req admission.Request) (uid string) {
	var m metav1.PartialObjectMetadata
	if json.Unmarshal(req.OldObject.Raw, &m) == nil {
		return string(m.UID)
	}
	return ""
}

// ledger keeps admitted disruptions in the budgets' status.
func (h *Budgets) ledger() *ledger.Ledger[*v1alpha1.PodUnavailableBudget] {
	return h.written.Of(h.Client, h.Cache, h.Clock, func() *v1alpha1.PodUnavailableBudget { return &v1alpha1.PodUnavailableBudget{} })
}

// consume decides the disruption against one budget and, if admitted and
// not a dry run, records it in the budget's status. took says whether it
// was recorded (and must be given back if another budget denies).
func (h *Budgets) consume(ctx context.Context, k budget.Key, r budget.Request, pod disrupted, dry bool, now time.Time, paid *bool) (v verdict.Verdict, took bool, err error) {
	out, err := h.ledger().Decide(ctx, ledger.Request{Object: client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, DryRun: dry},
		func(b *v1alpha1.PodUnavailableBudget) (ledger.Decision, error) {
			var consume bool
			if budget.Grouped(b.Spec) {
				var node map[string]string
				if h.Nodes != nil {
					node = h.Nodes.NodeLabels(pod.node)
				}
				r.Group = budget.GroupOf(b.Spec, pod.labels, node)
				r.GroupPods = h.Index.GroupPods(k, r.Group)
			}
			v, consume = budget.Decide(b, r, h.PartitionThreshold)
			if free, _ := budget.Free(b, r, h.PartitionThreshold); !free {
				*paid = true
			}
			if consume {
				// A free eviction too (see Decide): the status may still
				// count its pod available, and its group whole.
				budget.Consume(b, r, now)
			}
			return ledger.Decision{Verdict: v, Write: consume}, nil
		})
	switch {
	case err != nil:
		return v, false, fmt.Errorf("recording the disruption in PodUnavailableBudget %s: %w", k, err)
	case out.Gone:
		return verdict.Allow, false, nil // deleted since: it guards nothing
	}
	return v, out.Written, nil
}

// giveBack removes a disruption this request recorded, when another budget
// denied it. If that fails, the status controller returns it after the
// disruption timeout.
func (h *Budgets) giveBack(ctx context.Context, k budget.Key, pod string, at time.Time) {
	_ = h.ledger().Amend(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, func(b *v1alpha1.PodUnavailableBudget) bool {
		return budget.GiveBack(b, pod, at)
	})
}
