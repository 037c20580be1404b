package nodebudget

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

func node(ready bool, mods ...func(*corev1.Node)) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	for _, m := range mods {
		m(n)
	}
	return n
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func tainted(key string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect}) }
}

func TestLeaves(t *testing.T) {
	for _, c := range []struct {
		name     string
		old, new *corev1.Node
		want     string
	}{
		{"delete of a Ready node", node(true), nil, Delete},
		{"delete of a NotReady node is healing", node(false), nil, ""},
		{"delete of a cordoned node", node(true, cordoned), nil, ""},
		{"cordon", node(true), node(true, cordoned), Cordon},
		{"cordon of a NotReady node", node(false), node(false, cordoned), ""},
		{"uncordon", node(true, cordoned), node(true), ""},
		{"a user's NoSchedule taint", node(true), node(true, tainted("dedicated", corev1.TaintEffectNoSchedule)), Taint},
		{"a user's NoExecute taint", node(true), node(true, tainted("maintenance", corev1.TaintEffectNoExecute)), Taint},
		{"the cluster autoscaler's scale-down taint", node(true), node(true, tainted("ToBeDeletedByClusterAutoscaler", corev1.TaintEffectNoSchedule)), Taint},
		{"a PreferNoSchedule taint keeps it in service", node(true), node(true, tainted("soft", corev1.TaintEffectPreferNoSchedule)), ""},
		{"the lifecycle controller's not-ready taint", node(true), node(true, tainted("node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute)), ""},
		{"the lifecycle controller's unreachable taint", node(true), node(true, tainted("node.kubernetes.io/unreachable", corev1.TaintEffectNoSchedule)), ""},
		{"the cloud controller's uninitialized taint", node(true), node(true, tainted("node.cloudprovider.kubernetes.io/uninitialized", corev1.TaintEffectNoSchedule)), ""},
		{"a label change", node(true), node(true, func(n *corev1.Node) { n.Labels = map[string]string{"a": "b"} }), ""},
		{"a taint already there", node(true, tainted("x", corev1.TaintEffectPreferNoSchedule)), node(true, tainted("x", corev1.TaintEffectPreferNoSchedule)), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Leaves(c.old, c.new); got != c.want {
				t.Errorf("Leaves = %q, want %q", got, c.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	// A departure recorded at version "1"; the view's nodes are at "1"
	// too unless a test says the view has seen a later write.
	ago := func(d time.Duration, n string) v1alpha1.NodeDisruption {
		return v1alpha1.NodeDisruption{Node: n, Kind: Cordon, Time: metav1.NewTime(now.Add(-d)), ResourceVersion: "1"}
	}
	// nodes are n selected nodes in service, then out more out of it.
	nodes := func(n int, out ...string) []Node {
		var ns []Node
		for i := range n {
			ns = append(ns, Node{Name: "n" + string(rune('a'+i)), ResourceVersion: "1", Available: true})
		}
		for _, o := range out {
			ns = append(ns, Node{Name: o, ResourceVersion: "2"})
		}
		return ns
	}
	seen := func(ns []Node, name string) []Node { // the view read a later write of name, still in service
		for i := range ns {
			if ns[i].Name == name {
				ns[i].ResourceVersion = "3"
			}
		}
		return ns
	}
	count := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	for _, c := range []struct {
		name       string
		spec       v1alpha1.NodeDisruptionBudgetSpec
		past       []v1alpha1.NodeDisruption
		nodes      []Node
		version    string
		node       string
		allowed    bool
		reason     string
		retryAfter time.Duration
	}{
		{name: "above the floor", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(3)},
			nodes: nodes(5), node: "na", allowed: true},
		{name: "at the floor", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(5)},
			nodes: nodes(5), node: "na", reason: RuleFloor},
		{name: "a percentage rounds up", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: pct("81%")},
			nodes: nodes(5), node: "na", reason: RuleFloor},
		{name: "80% of 5 lets one go", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: pct("80%")},
			nodes: nodes(5), node: "na", allowed: true},
		{name: "a departure the view does not show yet counts", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(4)},
			past: []v1alpha1.NodeDisruption{ago(10*time.Second, "nb")}, nodes: nodes(5), node: "na", reason: RuleFloor},
		{name: "a departure the view shows counts once", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(3)},
			past: []v1alpha1.NodeDisruption{ago(10*time.Second, "ne")}, nodes: nodes(4, "ne"), node: "na", allowed: true},
		{name: "an old departure no longer pends", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(4)},
			past: []v1alpha1.NodeDisruption{ago(5*time.Minute, "nb")}, nodes: nodes(5), node: "na", allowed: true},
		{name: "the same departure again is not counted again", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(4)},
			past: []v1alpha1.NodeDisruption{ago(time.Second, "na"), ago(time.Second, "nb")}, nodes: nodes(5), node: "na", version: "1", allowed: true},
		{name: "a node back in service leaving again is judged afresh", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(4)},
			past: []v1alpha1.NodeDisruption{ago(time.Second, "na"), ago(time.Second, "nb")}, nodes: nodes(5), node: "na", version: "4", reason: RuleFloor},
		{name: "a departure the view has seen, the node back since, no longer counts", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(4)},
			past: []v1alpha1.NodeDisruption{ago(10*time.Second, "nb")}, nodes: seen(nodes(5), "nb"), node: "na", allowed: true},
		{name: "below the floor already (dead nodes), a healthy one stays", spec: v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: count(3)},
			nodes: nodes(3, "nx", "ny"), node: "na", reason: RuleFloor},
		{name: "rate has room", spec: v1alpha1.NodeDisruptionBudgetSpec{Rate: &v1alpha1.DisruptionRate{Count: 2, Window: "1h"}},
			past: []v1alpha1.NodeDisruption{ago(30*time.Minute, "nx")}, nodes: nodes(5), node: "na", allowed: true},
		{name: "rate used up", spec: v1alpha1.NodeDisruptionBudgetSpec{Rate: &v1alpha1.DisruptionRate{Count: 2, Window: "1h"}},
			past:  []v1alpha1.NodeDisruption{ago(10*time.Minute, "nx"), ago(40*time.Minute, "ny")},
			nodes: nodes(5), node: "na", reason: RuleRate},
		{name: "a short wait is a Retry-After", spec: v1alpha1.NodeDisruptionBudgetSpec{Rate: &v1alpha1.DisruptionRate{Count: 1, Window: "1m"}},
			past:  []v1alpha1.NodeDisruption{ago(40*time.Second, "nx")},
			nodes: nodes(5), node: "na", reason: RuleRate, retryAfter: 20 * time.Second},
		{name: "rate window slid past", spec: v1alpha1.NodeDisruptionBudgetSpec{Rate: &v1alpha1.DisruptionRate{Count: 2, Window: "1h"}},
			past:  []v1alpha1.NodeDisruption{ago(10*time.Minute, "nx"), ago(61*time.Minute, "ny")},
			nodes: nodes(5), node: "na", allowed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &v1alpha1.NodeDisruptionBudgetStatus{Disruptions: append([]v1alpha1.NodeDisruption(nil), c.past...)}
			v, _, err := Decide(c.spec, st, Request{Budget: "pool", Node: c.node, ResourceVersion: c.version, Kind: Cordon, User: "alice",
				Nodes: c.nodes}, now)
			if err != nil {
				t.Fatal(err)
			}
			if v.Allowed != c.allowed || v.Reason != c.reason || v.RetryAfter != c.retryAfter {
				t.Fatalf("verdict = %+v, want allowed=%v reason=%q retryAfter=%v", v, c.allowed, c.reason, c.retryAfter)
			}
			if !v.Allowed {
				if v.Refusal != verdict.Throttled || !strings.Contains(v.Message, "kubectl patch nodedisruptionbudget pool") {
					t.Errorf("a refusal is Throttled and names the way out; got %v %q", v.Refusal, v.Message)
				}
				if len(st.RecentDenied) != 1 || st.RecentDenied[0].User != "alice" {
					t.Errorf("recentDenied = %+v", st.RecentDenied)
				}
			}
		})
	}
}

// TestDecideRecordsDepartures: admitted departures are recorded, so the
// next replica counts them before any cache reads them.
func TestDecideRecordsDepartures(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	spec := v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: func() *intstr.IntOrString { v := intstr.FromInt32(3); return &v }()}
	st := &v1alpha1.NodeDisruptionBudgetStatus{}
	var all []Node
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		all = append(all, Node{Name: n, ResourceVersion: "7", Available: true})
	}
	var admitted []string
	for _, n := range all {
		v, _, err := Decide(spec, st, Request{Budget: "pool", Node: n.Name, ResourceVersion: "7", Kind: Cordon, Nodes: all}, now)
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			admitted = append(admitted, n.Name)
		}
	}
	if len(admitted) != 2 {
		t.Fatalf("admitted %v of 5 with a floor of 3 and a view that never catches up; want 2", admitted)
	}
	if st.AvailableNodes != 3 || st.ExpectedNodes != 5 || st.DesiredAvailable != 3 {
		t.Errorf("status = %d/%d floor %d, want 3/5 floor 3", st.AvailableNodes, st.ExpectedNodes, st.DesiredAvailable)
	}
}

func TestInvalidSpec(t *testing.T) {
	_, _, err := Decide(v1alpha1.NodeDisruptionBudgetSpec{Rate: &v1alpha1.DisruptionRate{Count: 1, Window: "soon"}},
		&v1alpha1.NodeDisruptionBudgetStatus{}, Request{Node: "a", Nodes: []Node{{Name: "a", Available: true}}}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "rate.window") {
		t.Fatalf("err = %v, want one naming rate.window", err)
	}
}

// A delete storm under a percent floor: each node deleted leaves the view
// at once (the worst case for the floor), and still counts as one of the
// pool's nodes, out of service, for DeletedFor; a node that left service
// before it was deleted, or was registered again, counts as it is.
func TestDeletedNodesKeepThePoolsSize(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ninety := intstr.FromString("90%")
	spec := v1alpha1.NodeDisruptionBudgetSpec{MinAvailable: &ninety}
	st := &v1alpha1.NodeDisruptionBudgetStatus{}
	view := map[string]Node{}
	for i := range 20 {
		n := Node{Name: string(rune('a' + i)), ResourceVersion: "7", Available: true}
		view[n.Name] = n
	}
	nodes := func() []Node {
		var out []Node
		for _, n := range view {
			out = append(out, n)
		}
		return out
	}
	deleted := 0
	var refusal string
	for i := range 20 {
		name := string(rune('a' + i))
		v, _, err := Decide(spec, st, Request{Budget: "pool", Node: name, ResourceVersion: "7", Kind: Delete, Nodes: nodes()}, now)
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			deleted++
			delete(view, name)
		} else {
			refusal = v.Message
		}
	}
	if deleted != 2 || st.ExpectedNodes != 20 {
		t.Fatalf("%d of 20 deleted under a 90%% floor (expected %d); want 2 of 20", deleted, st.ExpectedNodes)
	}
	if !strings.Contains(refusal, "keeps at least 18 of the 20 nodes it selects (2 of them deleted in service in the last 1h, counted out of service that long)") {
		t.Errorf("refusal %q does not say the deleted nodes are counted", refusal)
	}
	// One of the two is registered again by its kubelet: in service, as
	// it reads.
	view["a"] = Node{Name: "a", ResourceVersion: "9", Available: true}
	if v, _, _ := Decide(spec, st, Request{Budget: "pool", Node: "c", ResourceVersion: "7", Kind: Delete, Nodes: nodes()}, now.Add(time.Minute)); !v.Allowed {
		t.Errorf("with a deleted node back, another delete is refused: %s", v.Message)
	}
	delete(view, "c")
	// An hour on, the deleted nodes are no longer the pool's.
	if v, _, _ := Decide(spec, st, Request{Budget: "pool", Node: "d", ResourceVersion: "7", Kind: Delete, Nodes: nodes()}, now.Add(DeletedFor+2*time.Minute)); !v.Allowed ||
		st.ExpectedNodes != 18 {
		t.Errorf("after %s: allowed %v, expected %d; want allowed of 18 (%s)", DeletedFor, v.Allowed, st.ExpectedNodes, v.Message)
	}
	// A cordoned node deleted costs nothing and leaves the pool at once
	// (the webhook's match conditions never send it; Leaves says so).
	if Leaves(node(true, cordoned), nil) != "" {
		t.Error("the delete of a cordoned node is a departure")
	}
}
