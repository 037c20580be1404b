package budget

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// shards is a budget over shards of three, one pod of each at most.
func shards(maxGroups *int32) *v1alpha1.PodUnavailableBudget {
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(1)}
	b.Spec.GroupBy = &v1alpha1.PodGroupBy{LabelKey: "shard"}
	b.Spec.MaxGroupsDisrupted = maxGroups
	b.Namespace, b.Name, b.Generation = "db", "redis", 1
	return b
}

// shardPods are n shards of three pods, all Ready.
func shardPods(n int) []Pod {
	var pods []Pod
	for s := range n {
		for i := range 3 {
			pods = append(pods, Pod{Name: fmt.Sprintf("redis-%d-%d", s, i), Ready: true,
				Labels: map[string]string{"app": "web", "shard": fmt.Sprint(s)}, Controller: fmt.Sprintf("StatefulSet/redis-%d", s)})
		}
	}
	return pods
}

func statefulSets(c string) (string, int32, bool) { return c, 3, true }

func compute(t *testing.T, b *v1alpha1.PodUnavailableBudget, pods []Pod, now time.Time) {
	t.Helper()
	st, err := ComputeGrouped(b, pods, GroupTotals(b.Spec, pods, statefulSets, b.Status.GroupStatus), now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.Status = st
}

func deleteOf(pod, group string) Request {
	return Request{Namespace: "db", Pod: pod, Op: v1alpha1.DisruptDelete, Verb: "delete", Group: group, GroupPods: 3}
}

func TestGroupedBudgetKeepsEachShardAboveItsFloor(t *testing.T) {
	now := time.Now()
	b := shards(nil)
	pods := shardPods(3)
	pods[0].Ready = false // shard 0 is short already
	compute(t, b, pods, now)
	st := b.Status
	if st.Groups != 3 || st.DisruptedGroups != 1 || st.TotalReplicas != 9 || st.CurrentAvailable != 8 || st.DesiredAvailable != 6 {
		t.Fatalf("status = %+v", st)
	}
	// Shard 0 allows nothing more; shards 1 and 2 one pod each.
	if st.UnavailableAllowed != 2 || len(st.GroupStatus) != 1 || st.GroupStatus[0].Name != "0" || st.GroupStatus[0].Allowed != 0 {
		t.Fatalf("status = %+v", st)
	}
	v, _ := Decide(b, deleteOf("redis-0-1", "0"), 0)
	want := "pod db/redis-0-1 may not be deleted now: PodUnavailableBudget db/redis allows no more disruptions in group shard=0 (2 of 3 pods available, 2 must stay available, 0 disruptions in progress). " +
		"Wait for the disrupted groups' pods to become Ready and retry (kubectl rampart pub status -n db), or change the budget (kubectl edit pub -n db redis)"
	if v.Allowed || v.Message != want {
		t.Fatalf("second pod of shard 0:\n got %q\nwant %q", v.Message, want)
	}
	// One of every other shard may go at once.
	for _, s := range []string{"1", "2"} {
		r := deleteOf("redis-"+s+"-0", s)
		v, consume := Decide(b, r, 0)
		if !v.Allowed || !consume {
			t.Fatalf("first pod of shard %s: %+v", s, v)
		}
		Consume(b, r, now)
	}
	for _, s := range []string{"1", "2"} {
		if v, _ := Decide(b, deleteOf("redis-"+s+"-1", s), 0); v.Allowed {
			t.Fatalf("second pod of shard %s admitted", s)
		}
	}
	if b.Status.DisruptedGroups != 3 || b.Status.UnavailableAllowed != 0 || b.Status.DisruptionGroups["redis-1-0"] != "1" {
		t.Fatalf("after two disruptions: %+v", b.Status)
	}
	// The controller sees both pods go: the groups stay listed, disrupted.
	pods[3].Gone, pods[6].Gone = true, true
	compute(t, b, pods, now.Add(time.Second))
	if len(b.Status.Disruptions) != 0 || b.Status.DisruptedGroups != 3 || b.Status.UnavailableAllowed != 0 {
		t.Fatalf("observed: %+v", b.Status)
	}
	if v, _ := Decide(b, deleteOf("redis-1-1", "1"), 0); v.Allowed {
		t.Fatal("second pod of shard 1 admitted once the first was seen gone")
	}
}

func TestGroupedBudgetCapsTheGroupsDisruptedAtOnce(t *testing.T) {
	now := time.Now().Truncate(time.Second) // as the API server stores it
	b := shards(ptr.To[int32](2))
	compute(t, b, shardPods(4), now)
	if b.Status.UnavailableAllowed != 2 || b.Status.DisruptedGroups != 0 || b.Status.GroupStatus != nil {
		t.Fatalf("status = %+v", b.Status)
	}
	for _, s := range []string{"0", "1"} {
		r := deleteOf("redis-"+s+"-0", s)
		if v, consume := Decide(b, r, 0); !v.Allowed || !consume {
			t.Fatalf("shard %s: %+v", s, v)
		}
		Consume(b, r, now)
	}
	v, _ := Decide(b, deleteOf("redis-2-0", "2"), 0)
	if v.Allowed || !strings.Contains(v.Message, "has 2 of its 4 groups (by shard) disrupted already, at most 2 at once, and group \"2\" is not one of them") {
		t.Fatalf("third shard: %+v", v)
	}
	// Giving one back (another budget refused the request) frees its group.
	if !GiveBack(b, "redis-1-0", now) || b.Status.DisruptedGroups != 1 || len(b.Status.GroupStatus) != 1 {
		t.Fatalf("after give back: %+v", b.Status)
	}
	if v, _ := Decide(b, deleteOf("redis-2-0", "2"), 0); !v.Allowed {
		t.Fatalf("third shard once one was given back: %+v", v)
	}
}

func TestGangBudgetCountsAMemberAsTheWholeGroup(t *testing.T) {
	now := time.Now()
	b := &v1alpha1.PodUnavailableBudget{Spec: v1alpha1.PodUnavailableBudgetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}},
		GroupBy:  &v1alpha1.PodGroupBy{LabelKey: "job"}, MaxGroupsDisrupted: ptr.To[int32](1), Gang: true}}
	b.Namespace, b.Name, b.Generation = "ml", "workers", 1
	var pods []Pod
	for _, job := range []string{"a", "b", "c"} {
		for i := range 4 {
			pods = append(pods, Pod{Name: fmt.Sprintf("%s-%d", job, i), Ready: true, Labels: map[string]string{"app": "train", "job": job},
				Controller: "Job/" + job})
		}
	}
	jobs := func(c string) (string, int32, bool) { return c, 4, true }
	st, err := ComputeGrouped(b, pods, GroupTotals(b.Spec, pods, jobs, nil), now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.Status = st
	if st.Groups != 3 || st.UnavailableAllowed != 1 || st.DesiredAvailable != 12 {
		t.Fatalf("status = %+v", st)
	}
	evict := func(pod, job string) Request {
		return Request{Namespace: "ml", Pod: pod, Op: v1alpha1.DisruptEvict, Verb: "evict", Group: job, GroupPods: 4}
	}
	r := evict("a-0", "a")
	if v, consume := Decide(b, r, 0); !v.Allowed || !consume {
		t.Fatalf("first member of job a: %+v", v)
	}
	Consume(b, r, now)
	// Job a is broken: its other workers are lost with it (recorded, so
	// that it reads broken until they are seen going).
	r = evict("a-1", "a")
	if v, consume := Decide(b, r, 0); !v.Allowed || !consume {
		t.Fatalf("second member of a broken job: %+v, consume %v", v, consume)
	}
	Consume(b, r, now)
	if b.Status.DisruptedGroups != 1 || b.Status.GroupStatus[0].Disruptions != 2 {
		t.Fatalf("after two members of job a: %+v", b.Status)
	}
	v, _ := Decide(b, evict("b-0", "b"), 0)
	want := "pod ml/b-0 may not be evicted now: PodUnavailableBudget ml/workers is a gang budget by job and 1 of its 3 groups are already broken (at most 1 at once); " +
		"disrupting this pod breaks group \"b\" (4 pods). Wait for the disrupted groups' pods to become Ready and retry (kubectl rampart pub status -n ml), or change the budget (kubectl edit pub -n ml workers)"
	if v.Allowed || v.Message != want {
		t.Fatalf("a member of another job:\n got %q\nwant %q", v.Message, want)
	}
	// A worker already unavailable costs nothing (unhealthyPodPolicy
	// AlwaysAllow), even in an intact job; its eviction is recorded all
	// the same (it may be Ready by the time it is carried out).
	r = evict("c-0", "c")
	r.Unavailable = "it is not Ready"
	if v, consume := Decide(b, r, 0); !v.Allowed || !consume {
		t.Fatalf("a broken worker: %+v (recorded: %v)", v, consume)
	}
}

func TestGroupedBudgetRefusesAnUnlistedGroupWhenTheListOverflows(t *testing.T) {
	b := shards(nil)
	b.Status = v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, Groups: 5000, DisruptedGroups: MaxListedGroups + 1}
	for i := range MaxListedGroups {
		b.Status.GroupStatus = append(b.Status.GroupStatus, v1alpha1.PodGroupStatus{Name: fmt.Sprint(i), Total: 3, Available: 2, Desired: 2})
	}
	if v, _ := Decide(b, deleteOf("redis-4000-0", "4000"), 0); v.Allowed || !strings.Contains(v.Message, "cannot tell whether group \"4000\" is one of them") {
		t.Fatalf("unlisted group: %+v", v)
	}
}

func TestGroupTotals(t *testing.T) {
	spec := shards(nil).Spec
	pods := []Pod{
		// StatefulSet/s0 lives in shard 0 only: its replicas (3) count,
		// though one pod is missing.
		{Name: "s0-0", Labels: map[string]string{"shard": "0"}, Controller: "StatefulSet/s0"},
		{Name: "s0-1", Labels: map[string]string{"shard": "0"}, Controller: "StatefulSet/s0"},
		// Deployment spread over shards 1 and 2 (replicas 10): the pods
		// each has.
		{Name: "d-1", Labels: map[string]string{"shard": "1"}, Controller: "ReplicaSet/d-x"},
		{Name: "d-2", Labels: map[string]string{"shard": "2"}, Controller: "ReplicaSet/d-y"},
		{Name: "d-3", Labels: map[string]string{"shard": "2"}, Controller: "ReplicaSet/d-y"},
		// A bare pod, and one without the label.
		{Name: "bare", Labels: map[string]string{"shard": "1"}},
		{Name: "stray", Labels: map[string]string{}, Node: "n1"},
		// Not scheduled, no label: in no group yet.
		{Name: "unplaced", Labels: map[string]string{}},
	}
	replicas := func(c string) (string, int32, bool) {
		if c == "StatefulSet/s0" {
			return c, 3, true
		}
		return "Deployment/d", 10, true
	}
	got := GroupTotals(spec, pods, replicas, nil)
	want := map[string]int32{"0": 3, "1": 2, "2": 2, NoGroup: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("totals = %v, want %v", got, want)
	}
}

func TestIndexCountsAGroupedBudgetsPodsByGroup(t *testing.T) {
	x := NewIndex()
	b := shards(nil)
	x.SetBudget(b)
	for _, p := range shardPods(2) {
		x.SetPod("db", p)
	}
	k := Key{"db", "redis"}
	if x.GroupPods(k, "0") != 3 || x.GroupPods(k, "1") != 3 {
		t.Fatalf("groups: %d %d", x.GroupPods(k, "0"), x.GroupPods(k, "1"))
	}
	// A pod relabelled into another shard moves; a deleted one leaves.
	p := shardPods(2)[0]
	p.Labels = map[string]string{"app": "web", "shard": "1"}
	x.SetPod("db", p)
	x.DeletePod("db", "redis-1-2")
	if x.GroupPods(k, "0") != 2 || x.GroupPods(k, "1") != 3 {
		t.Fatalf("groups after moves: %d %d", x.GroupPods(k, "0"), x.GroupPods(k, "1"))
	}
}

// A key the pods lack is read from their nodes: grouping by
// topology.kubernetes.io/zone keeps a budget per zone.
func TestGroupsByTheNodesZone(t *testing.T) {
	b := shards(ptr.To[int32](1))
	b.Spec.GroupBy.LabelKey = "topology.kubernetes.io/zone"
	zone := func(z string) map[string]string { return map[string]string{"topology.kubernetes.io/zone": z} }
	var pods []Pod
	for i := range 6 {
		pods = append(pods, Pod{Name: fmt.Sprint("web-", i), Ready: true, Labels: map[string]string{"app": "web"},
			Node: fmt.Sprint("n", i), NodeLabels: zone([]string{"a", "b", "c"}[i%3]), Controller: "ReplicaSet/web-1"})
	}
	deployment := func(string) (string, int32, bool) { return "Deployment/web", 6, true }
	if got := fmt.Sprint(GroupTotals(b.Spec, pods, deployment, nil)); got != "map[a:2 b:2 c:2]" {
		t.Fatalf("totals = %s", got)
	}
	// A pod of zone a evicted and gone, its replacement not scheduled yet:
	// zone a, listed with 2, keeps its total while the Deployment lacks a
	// pod, so it stays short.
	gone := slices.DeleteFunc(slices.Clone(pods), func(p Pod) bool { return p.Name == "web-0" })
	gone = append(gone, Pod{Name: "web-6", Labels: map[string]string{"app": "web"}, Controller: "ReplicaSet/web-1"}) // not scheduled: no zone yet
	prev := []v1alpha1.PodGroupStatus{{Name: "a", Total: 2, Available: 1, Desired: 1, Disruptions: 1}}
	if got := fmt.Sprint(GroupTotals(b.Spec, gone, deployment, prev)); got != "map[a:2 b:2 c:2]" {
		t.Fatalf("totals with a pod gone = %s", got)
	}
	// Once the replacement lands in zone b, zone a has what it has.
	landed := slices.Clone(gone)
	landed[len(landed)-1].Node, landed[len(landed)-1].NodeLabels = "n1", zone("b")
	if got := fmt.Sprint(GroupTotals(b.Spec, landed, deployment, prev)); got != "map[a:1 b:3 c:2]" {
		t.Fatalf("totals once replaced in zone b = %s", got)
	}
	x := NewIndex()
	x.SetBudget(b)
	for _, p := range pods {
		x.SetPod("db", p)
	}
	if n := x.GroupPods(Key{"db", "redis"}, "b"); n != 2 {
		t.Fatalf("zone b has %d pods filed", n)
	}
	if g := GroupOf(b.Spec, map[string]string{"app": "web"}, zone("c")); g != "c" {
		t.Fatalf("group %q", g)
	}
}

// A free eviction in a grouped budget is counted in its pod's group, so
// that the recompute counts it there and in no made-up group.
func TestFreeEvictionInAGroupIsRecordedInItsGroup(t *testing.T) {
	now := time.Now()
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(1)}
	b.Spec.GroupBy = &v1alpha1.PodGroupBy{LabelKey: "shard"}
	r := Request{Namespace: "ns", Pod: "s0-1", Op: v1alpha1.DisruptEvict, Verb: "evict", Unavailable: "it is not Ready", Group: "s0", UID: "u"}
	Consume(b, r, now)
	if b.Status.DisruptionGroups["s0-1"] != "s0" || b.Status.DisruptedGroups != 1 {
		t.Fatalf("after recording a free eviction: %+v", b.Status)
	}
	pods := []Pod{
		{Name: "s0-0", Ready: true, Labels: map[string]string{"shard": "s0"}, Node: "n"},
		{Name: "s0-1", Ready: false, Labels: map[string]string{"shard": "s0"}, Node: "n"},
	}
	st, err := ComputeGrouped(b, pods, map[string]int32{"s0": 2}, now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Groups != 1 || len(st.GroupStatus) != 1 || st.GroupStatus[0].Name != "s0" {
		t.Fatalf("groups after the recompute: %+v", st)
	}
}

// Bare pods (no controller) size their group by the pods present. Once a
// disrupted pod is gone from the view that computes the status, its
// group must stay listed, disrupted, while the disruption is pending: a
// replica whose view still has the pod sizes an unlisted group whole at
// its old size and would admit one more (seen under an API server killed
// mid-storm: a store's shards lost 2 of 3 under minAvailable 2).
func TestGroupOfBarePodsStaysDisruptedWhileItsGonePodIsPending(t *testing.T) {
	now := time.Now()
	two := intstr.FromInt32(2)
	b := &v1alpha1.PodUnavailableBudget{Spec: v1alpha1.PodUnavailableBudgetSpec{MinAvailable: &two, GroupBy: &v1alpha1.PodGroupBy{LabelKey: "shard"}}}
	b.Namespace, b.Name, b.Generation = "db", "store", 1
	pods := shardPods(2)
	for i := range pods {
		pods[i].Controller = ""
	}
	bare := func(pods []Pod) {
		t.Helper()
		st, err := ComputeGrouped(b, pods, GroupTotals(b.Spec, pods, nil, b.Status.GroupStatus), now, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.Status = st
	}
	bare(pods)
	r := deleteOf("redis-0-0", "0")
	if v, consume := Decide(b, r, 0); !v.Allowed || !consume {
		t.Fatalf("first pod of shard 0: %+v", v)
	}
	Consume(b, r, now)
	// The status is computed again from a view where the pod is gone.
	bare(slices.Delete(slices.Clone(pods), 0, 1))
	if g := listedGroup(&b.Status, "0"); g == nil || g.Allowed != 0 {
		t.Fatalf("shard 0 with its deleted pod gone: listed %+v, want listed, allowing none (status %+v)", g, b.Status)
	}
	// Another replica, its view still holding the gone pod (3 in shard 0).
	if v, _ := Decide(b, deleteOf("redis-0-1", "0"), 0); v.Allowed {
		t.Fatal("a second pod of shard 0 admitted by a replica whose view lags")
	}
}
