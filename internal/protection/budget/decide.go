package budget

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// Compute is a budget's status from the pods it covers now. total is the
// number of pods it should have (the workloads' replicas; see the
// controller). A disruption admitted earlier stays pending, and its pod is
// not counted available, until the pod is seen unavailable, replaced by a
// newer pod of the same name, or timeout has passed: an admitted disruption
// that never happened (another webhook denied the request, a conflict)
// comes back after timeout at most.
func Compute(b *v1alpha1.PodUnavailableBudget, pods []Pod, total int32, now time.Time, timeout time.Duration) (v1alpha1.PodUnavailableBudgetStatus, error) {
	st := *b.Status.DeepCopy()
	st.ObservedGeneration = b.Generation
	st.TotalReplicas = total
	desired, err := Desired(b.Spec, total)
	if err != nil {
		return st, err
	}
	st.DesiredAvailable = desired
	pending := stillPending(b, pods, now, timeout)
	var available int32
	for _, p := range pods {
		if _, disrupted := pending[p.Name]; p.Available() && !disrupted {
			available++
		}
	}
	st.CurrentAvailable = available
	st.UnavailableAllowed = Allowed(desired, available)
	setPending(&st, pending)
	st.DisruptionGroups, st.Groups, st.DisruptedGroups, st.GroupStatus = nil, 0, 0, nil
	return st, nil
}

// ComputeGrouped is Compute for a budget with groupBy: totals are how
// many pods each group should have (see GroupTotals).
func ComputeGrouped(b *v1alpha1.PodUnavailableBudget, pods []Pod, totals map[string]int32, now time.Time, timeout time.Duration) (v1alpha1.PodUnavailableBudgetStatus, error) {
	st := *b.Status.DeepCopy()
	st.ObservedGeneration = b.Generation
	pending := stillPending(b, pods, now, timeout)
	if err := computeGroups(b, &st, pods, totals, pending); err != nil {
		return st, err
	}
	setPending(&st, pending)
	return st, nil
}

// stillPending are the disruptions of b's status not yet observed.
func stillPending(b *v1alpha1.PodUnavailableBudget, pods []Pod, now time.Time, timeout time.Duration) map[string]metav1.Time {
	byName := make(map[string]Pod, len(pods))
	for _, p := range pods {
		byName[p.Name] = p
	}
	pending := map[string]metav1.Time{}
	for name, at := range b.Status.Disruptions {
		p, present := byName[name]
		switch {
		case now.Sub(at.Time) > timeout:
			// Never observed: give the budget back.
		case present && (seenDone(b.Status, name, p) || p.Created.After(at.Time) || replaced(b.Status, name, p)):
			// Observed: the pod is going (unavailable, for an update), or
			// a new pod took its name.
		default:
			pending[name] = at
		}
	}
	return pending
}

// seenDone says whether a disruption of p is seen done: for a delete or an
// eviction, p is going; not merely unavailable, as an eviction of a pod
// not Ready is recorded precisely because it may be Ready by the time it
// is carried out. For an update or a resize (or a disruption recorded
// before kinds were), p is not available.
func seenDone(st v1alpha1.PodUnavailableBudgetStatus, name string, p Pod) bool {
	switch st.DisruptionOps[name] {
	case v1alpha1.DisruptDelete, v1alpha1.DisruptEvict:
		return p.Gone
	default:
		return !p.Available()
	}
}

// replaced says whether p took the name of the pod disrupted.
func replaced(st v1alpha1.PodUnavailableBudgetStatus, name string, p Pod) bool {
	uid, ok := st.DisruptionUIDs[name]
	return ok && uid != "" && p.UID != "" && uid != p.UID
}

func setPending(st *v1alpha1.PodUnavailableBudgetStatus, pending map[string]metav1.Time) {
	st.Disruptions = pending
	uids, ops := map[string]string{}, map[string]v1alpha1.DisruptionOperation{}
	for name := range pending {
		if uid, ok := st.DisruptionUIDs[name]; ok {
			uids[name] = uid
		}
		if op, ok := st.DisruptionOps[name]; ok {
			ops[name] = op
		}
	}
	st.DisruptionUIDs, st.DisruptionOps = uids, ops
	if len(ops) == 0 {
		st.DisruptionOps = nil
	}
	if len(pending) == 0 {
		st.Disruptions = nil
	}
	if len(uids) == 0 {
		st.DisruptionUIDs = nil
	}
}

// evictionInFlight says whether an eviction of this very pod (by UID when
// both are known) is recorded and not yet seen done.
//
// Only a delete is refused so: the same eviction asked again is the way
// kubectl drain retries one that Rampart admitted and a
// PodDisruptionBudget then refused (seen: a drain held 30 s, the
// disruption timeout, when this refused it), and is free (samePodDisrupted).
func evictionInFlight(st v1alpha1.PodUnavailableBudgetStatus, r Request) bool {
	if r.Op == v1alpha1.DisruptEvict {
		return false
	}
	if _, disrupted := st.Disruptions[r.Pod]; !disrupted || st.DisruptionOps[r.Pod] != v1alpha1.DisruptEvict {
		return false
	}
	uid := st.DisruptionUIDs[r.Pod]
	return uid == "" || r.UID == "" || uid == r.UID
}

// samePodDisrupted says whether the request's pod, this very pod, has a
// disruption in progress (for an eviction: an eviction of it, asked
// again, as kubectl drain retries one a PodDisruptionBudget refused after
// Rampart admitted it). Not a new pod that took the name (a
// StatefulSet's): its UID differs, or, for a disruption recorded without
// one, it was created after it (or in the same second). Not for an
// eviction either: it names no pod, only a name, and is carried out after
// this answer on whatever pod has the name then; a delete is judged on
// the very object it removes.
func samePodDisrupted(st v1alpha1.PodUnavailableBudgetStatus, r Request) bool {
	at, disrupted := st.Disruptions[r.Pod]
	if !disrupted || (r.Op == v1alpha1.DisruptEvict && st.DisruptionOps[r.Pod] != v1alpha1.DisruptEvict) {
		return false
	}
	if uid, ok := st.DisruptionUIDs[r.Pod]; ok && uid != "" {
		return uid == r.UID
	}
	return !r.Created.IsZero() && r.Created.Before(at.Time)
}

// NextExpiry is when the oldest pending disruption times out, zero if none.
func NextExpiry(st v1alpha1.PodUnavailableBudgetStatus, timeout time.Duration) time.Time {
	var next time.Time
	for _, at := range st.Disruptions {
		if t := at.Add(timeout); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Protects says whether the budget decides this kind of disruption.
func Protects(spec v1alpha1.PodUnavailableBudgetSpec, op v1alpha1.DisruptionOperation) bool {
	ops := spec.ProtectOperations
	if len(ops) == 0 {
		ops = []v1alpha1.DisruptionOperation{v1alpha1.DisruptDelete, v1alpha1.DisruptEvict, v1alpha1.DisruptUpdate}
	}
	return slices.Contains(ops, op)
}

// Request is one disruption of one pod.
type Request struct {
	Namespace, Pod string
	Op             v1alpha1.DisruptionOperation
	// Verb is how the user sees it: "delete", "evict", "update", "resize".
	Verb string
	// DryRun requests are decided and never consume the budget.
	DryRun bool
	// Unavailable says why the pod is already unavailable ("it is not
	// Ready", "its node n1 is NotReady"), "" for an available pod.
	Unavailable string
	// Nodes is what the adapter saw of the nodes this budget's pods run
	// on, for telling a dead node from a partition.
	Nodes NodeCount
	// Group is the pod's group for a budget with groupBy (GroupOf), and
	// GroupPods the pods the adapter sees in it: the size of a group the
	// budget's status does not list.
	Group     string
	GroupPods int32
	// UID and Created are the pod's: a disruption recorded for its name
	// with another UID, or before it was created, was another pod's.
	// Empty and zero when unknown: decided anew.
	UID     string
	Created time.Time
}

// NodeCount counts the nodes a budget's pods run on.
type NodeCount struct {
	// Total nodes running the budget's pods, NotReady of them NotReady or
	// unreachable.
	Total, NotReady int
}

// DefaultPartitionThreshold is the share of a budget's nodes that, NotReady
// at once, make a partition. It is kube-controller-manager's
// --unhealthy-zone-threshold default: the share at which the node
// lifecycle controller itself stops trusting what it sees of a zone and
// slows or stops its evictions there.
const DefaultPartitionThreshold = 0.55

// Partitioned says whether the budget's nodes look partitioned rather than
// one of them dead: at least two NotReady, and at least threshold of them
// (the node lifecycle controller's own rule for a zone's partial
// disruption, without its floor of three: a budget's pods often run on
// three nodes or fewer, and two of three gone at once is no dead node).
func (n NodeCount) Partitioned(threshold float64) bool {
	if threshold <= 0 {
		threshold = DefaultPartitionThreshold
	}
	return n.NotReady >= 2 && float64(n.NotReady) >= threshold*float64(n.Total)
}

// Decide decides one disruption against one budget's status (the latest
// written). consume is set when the disruption must be recorded in the
// budget's status before it is admitted (Consume: pod added to
// disruptions, one fewer allowed). A pod already unavailable costs
// nothing, as the budget's
// unhealthyPodPolicy says (see Free), unless the budget's nodes look
// partitioned (threshold, see NodeCount.Partitioned). A denial answers 429,
// as the Eviction API does for a PodDisruptionBudget: kubectl drain and
// controllers retry it.
func Decide(b *v1alpha1.PodUnavailableBudget, r Request, threshold float64) (v verdict.Verdict, consume bool) {
	if !Protects(b.Spec, r.Op) {
		return verdict.Allow, false
	}
	if evictionInFlight(b.Status, r) {
		// Admitted and not yet seen done: an eviction is carried out by
		// name after its answer, and if this pod went first by another
		// way, it would land on the pod that takes the name next (a
		// StatefulSet's). Nothing else may disrupt this pod until it is
		// seen going.
		return deny(fmt.Sprintf("pod %s/%s may not be %s now: an eviction of it admitted by PodUnavailableBudget %s/%s is in progress, "+
			"and an eviction is carried out on whatever pod has the name when it lands; retry in a few seconds",
			r.Namespace, r.Pod, past(r.Verb), b.Namespace, b.Name)), false
	}
	if samePodDisrupted(b.Status, r) {
		// The same disruption asked again (the API server retries a
		// delete whose write conflicted, calling the webhook again), or a
		// pod already counted as disrupted: no further loss.
		return verdict.Allow, false
	}
	free, held := Free(b, r, threshold)
	if free {
		// Free, but an eviction is still recorded: it is carried out by
		// name after this answer, and the pod it finds may have turned
		// Ready meanwhile (seen: 250 ms after a replacement's eviction
		// was admitted as not Ready). Recorded, the pod is not counted
		// available until it is seen going, and the next disruption of
		// its budget is decided knowing it; a delete is decided on the
		// very object it removes. It is counted, too (one fewer allowed
		// until the status is computed again, its group disrupted): the
		// status may be older than the pod's turn to not Ready, and still
		// count it available and its group whole (seen: two gangs broken
		// at once when it was only recorded).
		return verdict.Allow, r.Op == v1alpha1.DisruptEvict
	}
	computed := b.Status.ObservedGeneration == b.Generation && (b.Spec.TargetRef == nil || b.Status.Selector != "")
	if !computed {
		return deny(fmt.Sprintf("pod %s/%s may not be %s now: PodUnavailableBudget %s/%s is not computed yet; retry in a few seconds",
			r.Namespace, r.Pod, past(r.Verb), b.Namespace, b.Name)), false
	}
	if Grouped(b.Spec) {
		return decideGroup(b, r, held)
	}
	st := b.Status
	if st.UnavailableAllowed > 0 {
		return verdict.Allow, true
	}
	if never, why := NeverAllows(b.Spec); never {
		return deny(fmt.Sprintf("pod %s/%s may not be %s now: PodUnavailableBudget %s/%s allows no more disruptions, and none at any time (%s): "+
			"a drain or a rollout of these pods never finishes%s. Loosen it (kubectl patch pub -n %s %s --type merge -p '{\"spec\":{\"maxUnavailable\":1,\"minAvailable\":null}}') "+
			"or delete it (kubectl delete pub -n %s %s)",
			r.Namespace, r.Pod, past(r.Verb), b.Namespace, b.Name, why, held, b.Namespace, b.Name, b.Namespace, b.Name)), false
	}
	if blocks, why := BlocksAll(b.Spec, st); blocks {
		held += "; its " + why + ", so none may go until there are more"
	}
	return deny(fmt.Sprintf("pod %s/%s may not be %s now: PodUnavailableBudget %s/%s allows no more disruptions "+
		"(%d of %d pods available, %d must stay available, %d disruptions in progress)%s. "+
		"Wait for pods to become Ready and retry (kubectl rampart pub status -n %s), or change the budget (kubectl edit pub -n %s %s)",
		r.Namespace, r.Pod, past(r.Verb), b.Namespace, b.Name, st.CurrentAvailable, st.TotalReplicas, st.DesiredAvailable,
		len(st.Disruptions), held, b.Namespace, b.Namespace, b.Name)), false
}

// Free says whether disrupting an unavailable pod costs the budget nothing
// (KEP-3017's answer for PodDisruptionBudgets, for every disruption kind:
// a budget that counts broken pods as the reason to allow nothing wedges
// the node lifecycle controller, drains and recovery). When it does not,
// held says why, for the denial ("" when the pod is available).
func Free(b *v1alpha1.PodUnavailableBudget, r Request, threshold float64) (free bool, held string) {
	if r.Unavailable == "" {
		return false, ""
	}
	if r.Nodes.Partitioned(threshold) {
		// Kruise#1469: a partition must not become a mass deletion. The
		// pods may well be running behind it.
		return false, fmt.Sprintf("; the pod is unavailable (%s), but %d of the %d nodes this budget's pods run on are NotReady at once: "+
			"a partition or a network fault rather than a dead node, so the budget holds until they are Ready again",
			r.Unavailable, r.Nodes.NotReady, r.Nodes.Total)
	}
	switch b.Spec.UnhealthyPodPolicy {
	case v1alpha1.UnhealthyNever:
		return false, fmt.Sprintf("; the pod is unavailable (%s) and the budget's unhealthyPodPolicy is Never", r.Unavailable)
	case v1alpha1.UnhealthyIfHealthyBudget:
		st := b.Status
		if st.ObservedGeneration == b.Generation && st.CurrentAvailable >= st.DesiredAvailable {
			return true, ""
		}
		return false, fmt.Sprintf("; the pod is unavailable (%s), and with unhealthyPodPolicy IfHealthyBudget such pods go only "+
			"while the budget keeps its %d available", r.Unavailable, st.DesiredAvailable)
	default: // AlwaysAllow, and budgets stored before the field existed
		return true, ""
	}
}

// Terminating is the refusal of an eviction of a pod that is going
// already, covered by budgets keys: carried out by name after the answer,
// it could evict the pod that takes the name next (a StatefulSet's).
// kubectl drain retries a 429 and stops at NotFound.
func Terminating(r Request, keys []Key) verdict.Verdict {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.String()
	}
	v := deny(fmt.Sprintf("pod %s/%s may not be evicted now: it is being deleted already, and an eviction names no pod but a name, "+
		"which its replacement may take (PodUnavailableBudget %s). Retry once it is gone; to remove it at once, delete it (kubectl delete pod -n %s %s)",
		r.Namespace, r.Pod, strings.Join(names, ", "), r.Namespace, r.Pod))
	v.RetryAfter = time.Second
	return v
}

// Rule names budget denials in metrics and Events.
const Rule = "PodUnavailableBudget"

func deny(message string) verdict.Verdict {
	return verdict.Verdict{Reason: Rule, Message: message, Refusal: verdict.Throttled}
}

// Consume records an admitted disruption in a budget's status, at its
// cost: one fewer allowed.
func Consume(b *v1alpha1.PodUnavailableBudget, r Request, now time.Time) {
	record(b, r, now)
	b.Status.UnavailableAllowed = max(b.Status.UnavailableAllowed-1, 0)
	if Grouped(b.Spec) {
		consumeGroup(b, r)
	}
}

// record writes an admitted disruption into a budget's status, pending
// until its pod is seen going (Consume then counts it).
func record(b *v1alpha1.PodUnavailableBudget, r Request, now time.Time) {
	st := &b.Status
	if st.Disruptions == nil {
		st.Disruptions = map[string]metav1.Time{}
	}
	st.Disruptions[r.Pod] = metav1.NewTime(now)
	if r.UID != "" {
		if st.DisruptionUIDs == nil {
			st.DisruptionUIDs = map[string]string{}
		}
		st.DisruptionUIDs[r.Pod] = r.UID
	}
	if r.Op != "" {
		if st.DisruptionOps == nil {
			st.DisruptionOps = map[string]v1alpha1.DisruptionOperation{}
		}
		st.DisruptionOps[r.Pod] = r.Op
	}
	if Grouped(b.Spec) {
		// The group it is counted in until seen going (computeGroups).
		if st.DisruptionGroups == nil {
			st.DisruptionGroups = map[string]string{}
		}
		st.DisruptionGroups[r.Pod] = r.Group
	}
}

func past(verb string) string {
	switch verb {
	case "delete":
		return "deleted"
	case "evict":
		return "evicted"
	case "resize":
		return "resized"
	default:
		return "updated in place"
	}
}

// RestartsContainers says whether a pod update changes what its
// containers run, so that the kubelet restarts them in place: image,
// command, args, environment or resources of any container.
func RestartsContainers(old, cur *corev1.Pod) bool {
	return containersDiffer(old.Spec.Containers, cur.Spec.Containers) ||
		containersDiffer(old.Spec.InitContainers, cur.Spec.InitContainers)
}

func containersDiffer(a, b []corev1.Container) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Image != y.Image || !slices.Equal(x.Command, y.Command) || !slices.Equal(x.Args, y.Args) ||
			!equality.Semantic.DeepEqual(x.Env, y.Env) || !equality.Semantic.DeepEqual(x.EnvFrom, y.EnvFrom) ||
			!equality.Semantic.DeepEqual(x.Resources, y.Resources) {
			return true
		}
	}
	return false
}

// ResourcesDiffer says whether a resize changes any container's resources.
func ResourcesDiffer(old, cur *corev1.Pod) bool {
	if len(old.Spec.Containers) != len(cur.Spec.Containers) {
		return true
	}
	for i := range old.Spec.Containers {
		if !equality.Semantic.DeepEqual(old.Spec.Containers[i].Resources, cur.Spec.Containers[i].Resources) {
			return true
		}
	}
	return false
}
