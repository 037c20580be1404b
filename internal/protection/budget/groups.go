package budget

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// Budgets per group (spec.groupBy): the floor applies to each group of
// pods sharing a label's value, and maxGroupsDisrupted caps how many
// groups may be short at once. What must hold across manager replicas is
// in the budget's status, written through the ledger: every disruption in
// progress with its group, and every disrupted group's counts. A group the
// status does not list had all its pods available at the last compute,
// so a decision needs of it only its size, which the adapter reads from
// its index (Request.GroupPods). The list is bounded (MaxListedGroups)
// so that a budget over 50,000 groups stays a small object: only groups
// short of pods are listed, and while more are short than fit, a
// disruption in an unlisted group is refused rather than guessed.

// NoGroup names the group of the pods that lack the groupBy label.
const NoGroup = "(none)"

// MaxListedGroups bounds status.groupStatus.
const MaxListedGroups = 1000

// Grouped says whether a budget splits its pods into groups.
func Grouped(spec v1alpha1.PodUnavailableBudgetSpec) bool {
	return spec.GroupBy != nil && spec.GroupBy.LabelKey != ""
}

// GroupOf is the group of a pod with labels l on a node with labels
// node ("" for a budget without groupBy): the pod's label, else its
// node's, so that topology.kubernetes.io/zone groups pods by the zone
// they run in.
func GroupOf(spec v1alpha1.PodUnavailableBudgetSpec, l, node map[string]string) string {
	if !Grouped(spec) {
		return ""
	}
	return groupOf(spec.GroupBy.LabelKey, l, node)
}

// placedGroup is the group of a filed pod, ok false for a pod not in
// any group yet: without the label and not scheduled, its node (and so
// the group a node label would give it) is not known.
func placedGroup(key string, p Pod) (string, bool) {
	if _, ok := p.Labels[key]; !ok && p.Node == "" {
		return "", false
	}
	return groupOf(key, p.Labels, p.NodeLabels), true
}

func groupOf(key string, l, node map[string]string) string {
	if v, ok := l[key]; ok {
		return v
	}
	if v, ok := node[key]; ok {
		return v
	}
	return NoGroup
}

// groupDesired is the floor of a group of total pods: the spec's size
// applied to the group, or all of it for a gang.
func groupDesired(spec v1alpha1.PodUnavailableBudgetSpec, total int32) (int32, error) {
	if spec.Gang {
		return total, nil
	}
	return Desired(spec, total)
}

// GroupTotals is how many pods each group should have, from the pods of
// the budget and their controllers' replicas (replicas follows a pod's
// controller to the top one, see the cluster view), and prev, the groups
// the status lists now. A controller whose pods are all in one group (a
// StatefulSet per shard, a Job per gang) gives that group its replicas,
// so a pod deleted and not yet replaced is still missed. A controller
// spread over several groups (a Deployment over zones) gives each the
// pods it has there, and the pods it lacks (replicas not placed in any
// group: deleted, or replacements not scheduled yet) to the groups the
// status listed with more than they have now, so that a zone whose pod
// was evicted stays short until a replacement lands in it, not only until
// the pod is gone. Pods without a controller count one each.
func GroupTotals(spec v1alpha1.PodUnavailableBudgetSpec, pods []Pod, replicas func(controller string) (top string, n int32, ok bool), prev []v1alpha1.PodGroupStatus) map[string]int32 {
	totals := map[string]int32{}
	type share struct {
		replicas int32
		groups   map[string]int32
	}
	tops := map[string]*share{}
	for _, p := range pods {
		g, placed := placedGroup(spec.GroupBy.LabelKey, p)
		if placed {
			totals[g] += 0
		}
		top, n, ok := "", int32(0), false
		if p.Controller != "" && replicas != nil {
			top, n, ok = replicas(p.Controller)
		}
		switch {
		case !ok && placed:
			totals[g]++
		case ok:
			s := tops[top]
			if s == nil {
				s = &share{replicas: n, groups: map[string]int32{}}
				tops[top] = s
			}
			if placed {
				s.groups[g]++
			}
		}
	}
	var missing int32
	for _, s := range tops {
		if len(s.groups) == 1 {
			for g := range s.groups {
				totals[g] += s.replicas
			}
			continue
		}
		var placed int32
		for g, n := range s.groups {
			totals[g] += n
			placed += n
		}
		missing += max(s.replicas-placed, 0)
	}
	for _, g := range prev {
		if missing == 0 {
			break
		}
		if short := g.Total - totals[g.Name]; short > 0 {
			give := min(short, missing)
			totals[g.Name] += give
			missing -= give
		}
	}
	return totals
}

// computeGroups is Compute for a budget with groupBy. pending are the
// disruptions still in progress.
func computeGroups(b *v1alpha1.PodUnavailableBudget, st *v1alpha1.PodUnavailableBudgetStatus, pods []Pod, totals map[string]int32, pending map[string]metav1.Time) error {
	spec := b.Spec
	groups := map[string]*v1alpha1.PodGroupStatus{}
	group := func(name string) *v1alpha1.PodGroupStatus {
		g := groups[name]
		if g == nil {
			g = &v1alpha1.PodGroupStatus{Name: name}
			groups[name] = g
		}
		return g
	}
	for name, total := range totals {
		group(name).Total = total
	}
	for _, p := range pods {
		name, placed := placedGroup(spec.GroupBy.LabelKey, p)
		if !placed {
			continue // not scheduled: not available, and in no group yet
		}
		g := group(name)
		if _, disrupted := pending[p.Name]; p.Available() && !disrupted {
			g.Available++
		}
	}
	pendingGroups := map[string]string{}
	for pod := range pending {
		name, ok := b.Status.DisruptionGroups[pod]
		if !ok {
			name = NoGroup
		}
		pendingGroups[pod] = name
		// Counted while pending, the pod gone or not, so that its group
		// stays listed as disrupted. A group of pods without a controller
		// is sized by the pods present: once the pod is gone it would read
		// whole at its smaller size, unlisted, and a replica whose view
		// still has the pod would size it whole at its old size and admit
		// one more (seen under an API server killed mid-storm: every shard
		// of a store lost 2 of 3 under minAvailable 2).
		group(name).Disruptions++
	}
	st.DisruptionGroups = pendingGroups
	if len(pendingGroups) == 0 {
		st.DisruptionGroups = nil
	}
	var disrupted, healthy []*v1alpha1.PodGroupStatus
	st.TotalReplicas, st.CurrentAvailable, st.DesiredAvailable = 0, 0, 0
	for _, g := range groups {
		desired, err := groupDesired(spec, g.Total)
		if err != nil {
			return err
		}
		g.Desired = desired
		g.Allowed = Allowed(desired, g.Available)
		st.TotalReplicas += g.Total
		st.CurrentAvailable += g.Available
		st.DesiredAvailable += desired
		if g.Available < g.Total || g.Disruptions > 0 {
			disrupted = append(disrupted, g)
		} else {
			healthy = append(healthy, g)
		}
	}
	closest := func(a, b *v1alpha1.PodGroupStatus) int {
		return cmp.Or(cmp.Compare(a.Allowed, b.Allowed), cmp.Compare(b.Disruptions, a.Disruptions), cmp.Compare(a.Name, b.Name))
	}
	slices.SortFunc(disrupted, closest)
	st.Groups = int32(len(groups))
	st.DisruptedGroups = int32(len(disrupted))
	st.GroupStatus = nil
	for _, g := range disrupted[:min(len(disrupted), MaxListedGroups)] {
		st.GroupStatus = append(st.GroupStatus, *g)
	}
	st.UnavailableAllowed = groupsAllowed(spec, disrupted, healthy)
	return nil
}

// groupsAllowed is how many more disruptions may be admitted now, one at
// a time: for a gang, how many more groups may be broken; otherwise what
// the disrupted groups still allow, plus what the healthy groups allow
// that the cap lets in (the most generous first).
func groupsAllowed(spec v1alpha1.PodUnavailableBudgetSpec, disrupted, healthy []*v1alpha1.PodGroupStatus) int32 {
	room := int32(len(healthy))
	if c := spec.MaxGroupsDisrupted; c != nil {
		room = min(room, max(*c-int32(len(disrupted)), 0))
	}
	if spec.Gang {
		return room
	}
	var n int32
	for _, g := range disrupted {
		n += g.Allowed
	}
	slices.SortFunc(healthy, func(a, b *v1alpha1.PodGroupStatus) int { return cmp.Compare(b.Allowed, a.Allowed) })
	for _, g := range healthy[:room] {
		n += g.Allowed
	}
	return n
}

// listedGroup is the status entry of a group, nil if it is not listed.
func listedGroup(st *v1alpha1.PodUnavailableBudgetStatus, name string) *v1alpha1.PodGroupStatus {
	for i := range st.GroupStatus {
		if st.GroupStatus[i].Name == name {
			return &st.GroupStatus[i]
		}
	}
	return nil
}

// wholeGroup is a group the status does not list: all its pods were
// available at the last compute. size is the pods the adapter sees in it.
func wholeGroup(spec v1alpha1.PodUnavailableBudgetSpec, name string, size int32) (v1alpha1.PodGroupStatus, error) {
	size = max(size, 1) // the pod being disrupted is one
	desired, err := groupDesired(spec, size)
	return v1alpha1.PodGroupStatus{Name: name, Total: size, Available: size, Desired: desired, Allowed: Allowed(desired, size)}, err
}

// decideGroup is Decide's answer for a budget with groupBy, once the
// disruption is known to cost something (see Free).
func decideGroup(b *v1alpha1.PodUnavailableBudget, r Request, held string) (v verdict.Verdict, consume bool) {
	st := &b.Status
	g := listedGroup(st, r.Group)
	what := fmt.Sprintf("pod %s/%s may not be %s now: PodUnavailableBudget %s/%s", r.Namespace, r.Pod, past(r.Verb), b.Namespace, b.Name)
	fix := fmt.Sprintf("Wait for the disrupted groups' pods to become Ready and retry (kubectl rampart pub status -n %s), or change the budget (kubectl edit pub -n %s %s)",
		b.Namespace, b.Namespace, b.Name)
	if g == nil && st.DisruptedGroups > int32(len(st.GroupStatus)) {
		return deny(fmt.Sprintf("%s has %d groups disrupted at once, more than it lists (%d), and cannot tell whether group %q is one of them%s. %s",
			what, st.DisruptedGroups, len(st.GroupStatus), r.Group, held, fix)), false
	}
	whole := g == nil
	if whole {
		w, err := wholeGroup(b.Spec, r.Group, r.GroupPods)
		if err != nil {
			return deny(fmt.Sprintf("%s cannot be computed: %v. Fix the budget (kubectl edit pub -n %s %s)", what, err, b.Namespace, b.Name)), false
		}
		g = &w
	}
	capped := func() bool { c := b.Spec.MaxGroupsDisrupted; return whole && c != nil && st.DisruptedGroups >= *c }
	if b.Spec.Gang {
		if !whole {
			// Already broken: its other pods are lost with it. Recorded
			// all the same, so that the group stays broken in the status
			// until this pod is seen going: otherwise the group could read
			// whole (its pods Ready again) while this disruption is still
			// on its way, and another group be broken beside it.
			return verdict.Allow, true
		}
		if capped() {
			return deny(fmt.Sprintf("%s is a gang budget by %s and %d of its %d groups are already broken (at most %d at once); disrupting this pod breaks group %q "+
				"(%d pods)%s. %s", what, b.Spec.GroupBy.LabelKey, st.DisruptedGroups, st.Groups, *b.Spec.MaxGroupsDisrupted, r.Group, g.Total, held, fix)), false
		}
		return verdict.Allow, true
	}
	if g.Allowed <= 0 {
		return deny(fmt.Sprintf("%s allows no more disruptions in group %s=%s (%d of %d pods available, %d must stay available, %d disruptions in progress)%s. %s",
			what, b.Spec.GroupBy.LabelKey, r.Group, g.Available, g.Total, g.Desired, g.Disruptions, held, fix)), false
	}
	if capped() {
		return deny(fmt.Sprintf("%s has %d of its %d groups (by %s) disrupted already, at most %d at once, and group %q is not one of them%s. %s",
			what, st.DisruptedGroups, st.Groups, b.Spec.GroupBy.LabelKey, *b.Spec.MaxGroupsDisrupted, r.Group, held, fix)), false
	}
	return verdict.Allow, true
}

// consumeGroup counts an admitted disruption (recorded by record) in a
// grouped budget's status: its group becomes (or stays) a listed,
// disrupted group.
func consumeGroup(b *v1alpha1.PodUnavailableBudget, r Request) {
	st := &b.Status
	g := listedGroup(st, r.Group)
	if g == nil {
		w, _ := wholeGroup(b.Spec, r.Group, r.GroupPods)
		st.GroupStatus = append([]v1alpha1.PodGroupStatus{w}, st.GroupStatus...)
		st.DisruptedGroups++
		g = &st.GroupStatus[0]
	}
	g.Disruptions++
	g.Available = max(g.Available-1, 0)
	g.Allowed = max(g.Allowed-1, 0)
}

// GiveBack removes a disruption recorded at at (another budget refused
// the request that took it), and says whether there was one to remove.
func GiveBack(b *v1alpha1.PodUnavailableBudget, pod string, at time.Time) bool {
	st := &b.Status
	if t, ok := st.Disruptions[pod]; !ok || !t.Time.Equal(metav1.NewTime(at).Rfc3339Copy().Time) {
		return false
	}
	delete(st.Disruptions, pod)
	delete(st.DisruptionUIDs, pod)
	delete(st.DisruptionOps, pod)
	st.UnavailableAllowed++
	name, grouped := st.DisruptionGroups[pod]
	if !grouped {
		return true
	}
	delete(st.DisruptionGroups, pod)
	if g := listedGroup(st, name); g != nil {
		g.Disruptions = max(g.Disruptions-1, 0)
		g.Available++
		g.Allowed++
		if g.Disruptions == 0 && g.Available >= g.Total {
			st.GroupStatus = slices.DeleteFunc(st.GroupStatus, func(o v1alpha1.PodGroupStatus) bool { return o.Name == name })
			st.DisruptedGroups = max(st.DisruptedGroups-1, 0)
		}
	}
	return true
}
