// Package nodebudget decides whether one more node may leave service
// under a NodeDisruptionBudget: the water level of a pool of nodes (how
// many stay Ready and schedulable) and the rate at which they may leave.
// It is a pure function from (spec, status, the selected nodes, clock) to
// (verdict, next status); the admission adapter stores the next status
// with optimistic concurrency (internal/plumbing/ledger), which is what
// makes the floor and the rate exact across replicas.
//
// What it must never hold back is how the cluster heals: a node that is
// already out of service (NotReady, unreachable, cordoned, tainted) costs
// nothing to delete, cordon or taint further — the node lifecycle
// controller tainting and evicting a dead node, the cloud controller
// deleting a node whose machine is gone, an operator marking a dead node
// out-of-service. The lifecycle controller's own taints (node.kubernetes.io/
// and node.cloudprovider.kubernetes.io/ keys) never count as a node leaving,
// and the kubelet's writes are never judged (the webhook's match
// conditions keep them away from Rampart altogether, so they pass even
// while Rampart is down).
package nodebudget

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/ledger"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// Ways a node leaves service.
const (
	Delete = "Delete"
	Cordon = "Cordon"
	Taint  = "Taint"
)

// Rule names (a refusal's Reason).
const (
	RuleFloor = "node-disruption-budget-floor"
	RuleRate  = "node-disruption-budget-rate"
)

// InFlight is how long an admitted departure counts against the floor
// while the caches may still read the node as available (as a PDB's
// disruptedPods), and how long a repeat of the same departure — the API
// server's retry, a drain's cordon then its taint — is not counted again.
const InFlight = 2 * time.Minute

// DeletedFor is how long a node deleted while in service still counts
// as one of the pool's nodes, out of service. Without it a percent floor
// would follow a delete storm down: each delete makes the pool smaller
// and its floor with it. A node that left service first (cordoned,
// tainted, dead) and is then deleted leaves the pool at once, as a pool
// scaled down by its automation should; a node whose kubelet registers
// it again is counted as it is.
const DeletedFor = time.Hour

// MaxRetryAfter is the longest wait a rate refusal asks the client to
// sleep out by itself.
const MaxRetryAfter = 30 * time.Second

// maxRecent bounds status.recentDenied; maxDisruptions bounds
// status.disruptions (the CRD's maxItems).
const (
	maxRecent      = 10
	maxDisruptions = 1000
)

// healthTaint says whether a taint key is one the node lifecycle
// controller (or the cloud node controller) manages: how the cluster
// marks a node it found unhealthy or not yet initialised. Such a taint is
// healing, never a departure to count or refuse.
func healthTaint(key string) bool {
	return strings.HasPrefix(key, "node.kubernetes.io/") || strings.HasPrefix(key, "node.cloudprovider.kubernetes.io/")
}

// HealthTaintPrefixes are the taint key prefixes healthTaint passes, for
// the webhook's match conditions.
var HealthTaintPrefixes = []string{"node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"}

// Available says whether a node is in service: Ready, schedulable, and
// without a NoSchedule or NoExecute taint (any taint, the lifecycle
// controller's included: a node it tainted is out).
func Available(n *corev1.Node) bool {
	if n == nil || n.Spec.Unschedulable || n.DeletionTimestamp != nil {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Leaves says how a request takes a node out of service ("" when it does
// not): a delete, a cordon, or a NoSchedule/NoExecute taint that is not
// the lifecycle controller's, of a node that is in service now. old is
// the node before the request; updated is nil for a delete.
func Leaves(old, updated *corev1.Node) string {
	if !Available(old) {
		return "" // already out of service: costs nothing more
	}
	if updated == nil {
		return Delete
	}
	if updated.Spec.Unschedulable {
		return Cordon
	}
	for _, t := range updated.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute || healthTaint(t.Key) {
			continue
		}
		if !slices.ContainsFunc(old.Spec.Taints, func(o corev1.Taint) bool { return o.Key == t.Key && o.Effect == t.Effect }) {
			return Taint
		}
	}
	return ""
}

// Request is one node leaving service.
type Request struct {
	// Budget names the budget, for messages.
	Budget string
	Node   string
	// ResourceVersion is the node's as the request found it.
	ResourceVersion string
	// Kind is Delete, Cordon or Taint.
	Kind string
	User string
	// Nodes are the selected nodes as the caller's view reads them (the
	// requested node among them, read as in service: the request's copy
	// is newer than the view's).
	Nodes []Node
}

// Node is a selected node as a view reads it.
type Node struct {
	Name            string
	ResourceVersion string
	Available       bool
}

// Floor is how many of expected nodes the spec keeps in service.
func Floor(spec v1alpha1.NodeDisruptionBudgetSpec, expected int) (int, error) {
	if spec.MinAvailable == nil {
		return 0, nil
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, expected, true)
	if err != nil {
		return 0, fmt.Errorf("minAvailable %q: %w", spec.MinAvailable.String(), err)
	}
	return v, nil
}

// Window parses the rate's window (zero without a rate).
func Window(spec v1alpha1.NodeDisruptionBudgetSpec) (time.Duration, error) {
	if spec.Rate == nil {
		return 0, nil
	}
	w, err := time.ParseDuration(spec.Rate.Window)
	if err != nil || w < 10*time.Second {
		return 0, fmt.Errorf("rate.window %q: want a duration of 10s or more", spec.Rate.Window)
	}
	return w, nil
}

// Decide judges one departure against the budget's spec and status, and
// records it in the status when admitted (and the refusal when refused).
// It says whether the status changed. An error is a spec the decision
// cannot read.
func Decide(spec v1alpha1.NodeDisruptionBudgetSpec, st *v1alpha1.NodeDisruptionBudgetStatus, r Request, now time.Time) (verdict.Verdict, bool, error) {
	window, err := Window(spec)
	if err != nil {
		return verdict.Verdict{}, false, err
	}
	// The same request again (the API server asks again when it retries
	// a write) finds the node at the same version: admitted, not counted
	// twice. At another version it is judged afresh, in place of the
	// departure recorded (a retry after a conflict, or the node back in
	// service and leaving again): never past the floor.
	for i, d := range st.Disruptions {
		if d.Node == r.Node && now.Sub(d.Time.Time) < InFlight {
			if d.ResourceVersion == r.ResourceVersion {
				return verdict.Allow, false, nil
			}
			st.Disruptions = slices.Delete(st.Disruptions, i, i+1)
			break
		}
	}
	view := map[string]Node{}
	avail := 0
	for _, n := range r.Nodes {
		view[n.Name] = n
		if n.Available {
			avail++
		}
	}
	// Departures admitted lately that the view has not seen yet: it still
	// reads the node in service, at the version the departure found.
	for _, d := range st.Disruptions {
		if n, ok := view[d.Node]; ok && d.Node != r.Node && n.Available && now.Sub(d.Time.Time) < InFlight &&
			n.ResourceVersion == d.ResourceVersion {
			avail--
		}
	}
	// Nodes deleted in service lately that the view no longer has are
	// still the pool's, out of service (DeletedFor).
	deleted := Deleted(st.Disruptions, func(name string) bool { _, ok := view[name]; return ok || name == r.Node }, now)
	expected := len(r.Nodes) + deleted
	floor, err := Floor(spec, expected)
	if err != nil {
		return verdict.Verdict{}, false, err
	}
	st.ExpectedNodes, st.DesiredAvailable = int32(expected), int32(floor)
	var v verdict.Verdict
	switch recent, oldest := within(st.Disruptions, now, window); {
	case spec.MinAvailable != nil && avail-1 < floor:
		counted := ""
		if deleted > 0 {
			counted = fmt.Sprintf(" (%d of them deleted in service in the last %s, counted out of service that long)", deleted,
				strings.TrimSuffix(strings.TrimSuffix(DeletedFor.String(), "0s"), "0m"))
		}
		v = verdict.Verdict{Reason: RuleFloor, Refusal: verdict.Throttled, Message: fmt.Sprintf(
			"NodeDisruptionBudget %s keeps at least %d of the %d nodes it selects%s Ready and schedulable, and %d are: %s node %s would leave %d. "+
				"Bring a node back into service first (kubectl uncordon, or a new node), or lower the floor: "+
				"kubectl patch nodedisruptionbudget %s --type merge -p '{\"spec\":{\"minAvailable\":%d}}'",
			r.Budget, floor, expected, counted, avail, verb(r.Kind), r.Node, avail-1, r.Budget, max(avail-1, 0))}
	case spec.Rate != nil && recent >= int(spec.Rate.Count):
		wait := oldest.Add(window).Sub(now)
		v = verdict.Verdict{Reason: RuleRate, Refusal: verdict.Throttled, Message: fmt.Sprintf(
			"NodeDisruptionBudget %s lets %d of its nodes leave service per %s, and %d did: %s node %s may go in %s. "+
				"If this cannot wait, raise the rate: kubectl patch nodedisruptionbudget %s --type merge -p '{\"spec\":{\"rate\":{\"count\":%d,\"window\":%q}}}'",
			r.Budget, spec.Rate.Count, spec.Rate.Window, recent, verb(r.Kind), r.Node, wait.Round(time.Second), r.Budget, spec.Rate.Count+1, spec.Rate.Window)}
		// client-go (so kubectl cordon) sleeps out a 429's Retry-After by
		// itself, up to ten times: a departure an hour away would hang the
		// command for an hour. Only a short wait is left to the client;
		// a long one is in the message.
		if wait <= MaxRetryAfter {
			v.RetryAfter = wait
		}
	default:
		st.Disruptions = append([]v1alpha1.NodeDisruption{{Node: r.Node, Kind: r.Kind, User: r.User, Time: metav1.NewTime(now),
			ResourceVersion: r.ResourceVersion}}, st.Disruptions...)
		st.Disruptions = prune(st.Disruptions, now, max(window, InFlight), max(window, DeletedFor))
		st.AvailableNodes = int32(avail - 1)
		return verdict.Allow, true, nil
	}
	st.AvailableNodes = int32(avail)
	st.RecentDenied = ledger.Recent(st.RecentDenied, v1alpha1.DeniedRequester{User: r.User, Time: metav1.NewTime(now), Object: verb(r.Kind) + " node/" + r.Node}, maxRecent)
	return v, true, nil
}

// Deleted counts the nodes deleted in service within DeletedFor that are
// not present any more: still the pool's nodes, out of service.
func Deleted(ds []v1alpha1.NodeDisruption, present func(node string) bool, now time.Time) int {
	n := 0
	for _, d := range ds {
		if d.Kind == Delete && now.Sub(d.Time.Time) < DeletedFor && !present(d.Node) {
			n++
		}
	}
	return n
}

// within counts the departures in the window ending now, and the time of
// the oldest of them (when the next one may go).
func within(ds []v1alpha1.NodeDisruption, now time.Time, window time.Duration) (int, time.Time) {
	n, oldest := 0, now
	for _, d := range ds {
		if window > 0 && now.Sub(d.Time.Time) < window {
			n++
			if d.Time.Time.Before(oldest) {
				oldest = d.Time.Time
			}
		}
	}
	return n, oldest
}

// prune keeps the departures younger than keep (deletes: keepDeleted),
// newest first, at most maxDisruptions.
func prune(ds []v1alpha1.NodeDisruption, now time.Time, keep, keepDeleted time.Duration) []v1alpha1.NodeDisruption {
	out := ds[:0]
	for _, d := range ds {
		if age := now.Sub(d.Time.Time); age < keep || d.Kind == Delete && age < keepDeleted {
			out = append(out, d)
		}
	}
	return out[:min(len(out), maxDisruptions)]
}

func verb(kind string) string {
	switch kind {
	case Delete:
		return "deleting"
	case Cordon:
		return "cordoning"
	case Taint:
		return "tainting"
	}
	return strings.ToLower(kind)
}

// Describe says in one line where a budget stands, for `rampart status`.
func Describe(spec v1alpha1.NodeDisruptionBudgetSpec, st v1alpha1.NodeDisruptionBudgetStatus, now time.Time) string {
	window, _ := Window(spec)
	var parts []string
	if spec.MinAvailable != nil {
		parts = append(parts, fmt.Sprintf("%d/%d available, floor %d", st.AvailableNodes, st.ExpectedNodes, st.DesiredAvailable))
	}
	if spec.Rate != nil {
		n, _ := within(st.Disruptions, now, window)
		parts = append(parts, fmt.Sprintf("%d of %d left in the last %s", n, spec.Rate.Count, spec.Rate.Window))
	}
	return strings.Join(parts, "; ")
}
