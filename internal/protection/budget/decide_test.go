package budget

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

func maxUnavailable(n int) v1alpha1.PodUnavailableBudgetSpec {
	v := intstr.FromInt32(int32(n))
	return v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, MaxUnavailable: &v}
}

func TestComputeKeepsPendingDisruptionsUntilObserved(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	created := now.Add(-time.Hour)
	pods := []Pod{
		{Name: "a", Ready: true, Created: created},
		{Name: "b", Ready: true, Created: created},                   // disrupted 5s ago, not yet seen: pending
		{Name: "c", Ready: false, Created: created},                  // disrupted, now not Ready: observed
		{Name: "d", Ready: true, Gone: true, Created: created},       // disrupted, terminating: observed
		{Name: "e", Ready: true, Created: now.Add(-2 * time.Second)}, // a new pod took the name of a deleted one
		{Name: "f", Ready: true, Created: created},                   // disrupted long ago, never happened: returned
		{Name: "g", Ready: false, Created: created},                  // not Ready, never disrupted
	}
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(3)}
	b.Generation = 4
	b.Status.Disruptions = map[string]metav1.Time{
		"b": ago(5 * time.Second), "c": ago(5 * time.Second), "d": ago(5 * time.Second),
		"e": ago(10 * time.Second), "f": ago(31 * time.Second), "gone": ago(3 * time.Second),
	}
	st, err := Compute(b, pods, 7, now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Available: a, e, f (b is pending; c, g not Ready; d terminating).
	if st.CurrentAvailable != 3 || st.DesiredAvailable != 4 || st.UnavailableAllowed != 0 || st.ObservedGeneration != 4 {
		t.Fatalf("status = %+v", st)
	}
	// A pod already gone keeps its entry until it times out: harmless (it
	// is not counted available) and safe if the cache has not seen it yet.
	if len(st.Disruptions) != 2 || st.Disruptions["b"].Time.IsZero() || st.Disruptions["gone"].Time.IsZero() {
		t.Fatalf("pending = %v, want b and gone", st.Disruptions)
	}
	if got := NextExpiry(st, 30*time.Second); !got.Equal(now.Add(25 * time.Second)) {
		t.Fatalf("next expiry %v", got)
	}
}

func TestDecide(t *testing.T) {
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(2)}
	b.Namespace, b.Name, b.Generation = "shop", "web", 1
	b.Status = v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 10, CurrentAvailable: 9, DesiredAvailable: 8, UnavailableAllowed: 1}
	now := time.Now()
	r := Request{Namespace: "shop", Pod: "web-1", Op: v1alpha1.DisruptDelete, Verb: "delete", Created: now.Add(-time.Hour)}
	if v, consume := Decide(b, r, 0); !v.Allowed || !consume {
		t.Fatalf("first disruption: %+v", v)
	}
	Consume(b, Request{Pod: "web-1"}, now)
	if v, consume := Decide(b, r, 0); !v.Allowed || consume {
		t.Fatalf("the same pod again must pass without consuming: %+v", v)
	}
	// A StatefulSet's new pod of the same name is another pod: the
	// disruption recorded for the old one does not let it go free.
	renamed := r
	renamed.Created = now
	if v, _ := Decide(b, renamed, 0); v.Allowed {
		t.Fatal("a new pod that took a disrupted pod's name went free")
	}
	// Told by UID when recorded: the same pod's delete asked again (the
	// API server calls the webhook again when its write conflicts) is
	// free even in the second it was created; a new pod is not.
	b.Status.Disruptions, b.Status.DisruptionUIDs, b.Status.UnavailableAllowed = nil, nil, 1
	again := Request{Namespace: "shop", Pod: "web-9", Op: v1alpha1.DisruptDelete, Verb: "delete", UID: "u9", Created: now}
	Consume(b, again, now)
	if v, consume := Decide(b, again, 0); !v.Allowed || consume {
		t.Fatalf("the same pod's delete again: %+v", v)
	}
	again.UID = "u10"
	if v, _ := Decide(b, again, 0); v.Allowed {
		t.Fatal("a new pod of the same name went free")
	}
	// Nor an eviction: it is carried out on whatever pod has the name
	// after the answer.
	evict := r
	evict.Op, evict.Verb = v1alpha1.DisruptEvict, "evict"
	if v, _ := Decide(b, evict, 0); v.Allowed {
		t.Fatal("an eviction of a pod with a disruption in progress went free")
	}
	r.Pod = "web-2"
	v, _ := Decide(b, r, 0)
	want := "pod shop/web-2 may not be deleted now: PodUnavailableBudget shop/web allows no more disruptions (9 of 10 pods available, 8 must stay available, 1 disruptions in progress). Wait for pods to become Ready and retry (kubectl rampart pub status -n shop), or change the budget (kubectl edit pub -n shop web)"
	if v.Allowed || v.Message != want {
		t.Fatalf("got %+v\nwant %s", v, want)
	}
	r.Op, r.Verb = v1alpha1.DisruptResize, "resize"
	if v, consume := Decide(b, r, 0); !v.Allowed || consume {
		t.Fatalf("resize is not protected by default: %+v", v)
	}
	b.Generation = 2
	r.Op = v1alpha1.DisruptDelete
	if v, _ := Decide(b, r, 0); v.Allowed || !strings.Contains(v.Message, "not computed yet") {
		t.Fatalf("a changed spec not yet computed must not admit: %+v", v)
	}
}

// TestDecideUnavailablePods: a pod that is already unavailable costs a
// budget nothing (unhealthyPodPolicy AlwaysAllow, the default), costs
// nothing while the budget is healthy (IfHealthyBudget), is decided like
// any other (Never), and is decided like any other whatever the policy
// while most of the budget's nodes are NotReady at once.
func TestDecideUnavailablePods(t *testing.T) {
	// 3 pods, maxUnavailable 1, one already not Ready: nothing allowed.
	exhausted := v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 3, CurrentAvailable: 2, DesiredAvailable: 2}
	short := v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 3, CurrentAvailable: 1, DesiredAvailable: 2}
	healthy := v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 3, CurrentAvailable: 3, DesiredAvailable: 2, UnavailableAllowed: 1}
	deadNode := NodeCount{Total: 3, NotReady: 1}
	partition := NodeCount{Total: 3, NotReady: 2}
	for _, tt := range []struct {
		name        string
		policy      v1alpha1.UnhealthyPodPolicy
		status      v1alpha1.PodUnavailableBudgetStatus
		generation  int64
		unavailable string
		nodes       NodeCount
		op          v1alpha1.DisruptionOperation
		allowed     bool
		consume     bool
		message     string
	}{
		{name: "healthy pod, budget exhausted", status: exhausted, nodes: deadNode, message: "allows no more disruptions (2 of 3 pods available, 2 must stay available, 0 disruptions in progress). Wait"},
		{name: "pod on a dead node, default policy", status: exhausted, unavailable: "its node n1 is NotReady", nodes: deadNode, allowed: true},
		{name: "not Ready pod, AlwaysAllow", policy: v1alpha1.UnhealthyAlwaysAllow, status: exhausted, unavailable: "it is not Ready", allowed: true},
		// Admitted, and recorded: the pod an eviction finds may have
		// turned Ready since.
		{name: "evict a not Ready pod, AlwaysAllow", policy: v1alpha1.UnhealthyAlwaysAllow, op: v1alpha1.DisruptEvict, status: exhausted, unavailable: "it is not Ready", allowed: true, consume: true},
		{name: "update a not Ready pod, AlwaysAllow", policy: v1alpha1.UnhealthyAlwaysAllow, op: v1alpha1.DisruptUpdate, status: exhausted, unavailable: "it is not Ready", allowed: true},
		{name: "budget not computed yet, AlwaysAllow", status: exhausted, generation: 2, unavailable: "it is not Ready", allowed: true},
		{name: "IfHealthyBudget, budget healthy", policy: v1alpha1.UnhealthyIfHealthyBudget, status: healthy, unavailable: "it is not Ready", allowed: true},
		{name: "IfHealthyBudget, budget at its floor", policy: v1alpha1.UnhealthyIfHealthyBudget, status: exhausted, unavailable: "it is not Ready", allowed: true},
		{name: "IfHealthyBudget, budget short", policy: v1alpha1.UnhealthyIfHealthyBudget, status: short, unavailable: "it is not Ready",
			message: "(1 of 3 pods available, 2 must stay available, 0 disruptions in progress); the pod is unavailable (it is not Ready), and with unhealthyPodPolicy IfHealthyBudget such pods go only while the budget keeps its 2 available. Wait"},
		{name: "Never, budget exhausted", policy: v1alpha1.UnhealthyNever, status: exhausted, unavailable: "it is not Ready",
			message: "; the pod is unavailable (it is not Ready) and the budget's unhealthyPodPolicy is Never. Wait"},
		{name: "Never, budget with room consumes", policy: v1alpha1.UnhealthyNever, status: healthy, unavailable: "it is not Ready", allowed: true, consume: true},
		{name: "partition holds AlwaysAllow", status: exhausted, unavailable: "its node n2 is NotReady", nodes: partition,
			message: "; the pod is unavailable (its node n2 is NotReady), but 2 of the 3 nodes this budget's pods run on are NotReady at once: a partition or a network fault rather than a dead node, so the budget holds until they are Ready again. Wait"},
		{name: "partition with room consumes", status: healthy, unavailable: "its node n2 is NotReady", nodes: partition, allowed: true, consume: true},
		{name: "one of one node dead is no partition", status: exhausted, unavailable: "its node n1 is NotReady", nodes: NodeCount{Total: 1, NotReady: 1}, allowed: true},
		{name: "2 of 4 nodes is no partition", status: exhausted, unavailable: "its node n1 is NotReady", nodes: NodeCount{Total: 4, NotReady: 2}, allowed: true},
		{name: "3 of 5 nodes is a partition", status: exhausted, unavailable: "its node n1 is NotReady", nodes: NodeCount{Total: 5, NotReady: 3}, message: "3 of the 5 nodes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := maxUnavailable(1)
			spec.UnhealthyPodPolicy = tt.policy
			b := &v1alpha1.PodUnavailableBudget{Spec: spec, Status: tt.status}
			b.Namespace, b.Name, b.Generation = "shop", "web", max(tt.generation, 1)
			op := tt.op
			if op == "" {
				op = v1alpha1.DisruptDelete
			}
			r := Request{Namespace: "shop", Pod: "web-1", Op: op, Verb: "delete", Unavailable: tt.unavailable, Nodes: tt.nodes}
			v, consume := Decide(b, r, 0)
			if v.Allowed != tt.allowed || consume != tt.consume {
				t.Fatalf("allowed %v consume %v, want %v %v: %s", v.Allowed, consume, tt.allowed, tt.consume, v.Message)
			}
			if !tt.allowed && (v.Refusal != verdict.Throttled || !strings.Contains(v.Message, tt.message)) {
				t.Fatalf("denial %v %q\nwant it to contain %q", v.Refusal, v.Message, tt.message)
			}
		})
	}
}

// A budget that can never allow a disruption says so, and how to loosen
// it, in its denial.
func TestBlocksAll(t *testing.T) {
	ints := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	st := v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 3, CurrentAvailable: 3, DesiredAvailable: 3}
	for _, tt := range []struct {
		spec v1alpha1.PodUnavailableBudgetSpec
		why  string
	}{
		{v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: ints(intstr.FromInt32(0))}, "maxUnavailable is 0"},
		{v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: ints(intstr.FromString("0%"))}, "maxUnavailable is 0%"},
		{v1alpha1.PodUnavailableBudgetSpec{MinAvailable: ints(intstr.FromString("100%"))}, "minAvailable is 100%"},
		{v1alpha1.PodUnavailableBudgetSpec{MinAvailable: ints(intstr.FromInt32(3))}, "minAvailable 3 keeps all 3 pods"},
		{v1alpha1.PodUnavailableBudgetSpec{MinAvailable: ints(intstr.FromInt32(2))}, ""},
		{v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: ints(intstr.FromString("10%"))}, ""},
	} {
		s := st
		if d, err := Desired(tt.spec, s.TotalReplicas); err == nil {
			s.DesiredAvailable = d
		}
		blocks, why := BlocksAll(tt.spec, s)
		if blocks != (tt.why != "") || why != tt.why {
			t.Errorf("%+v: blocks %v %q, want %q", tt.spec, blocks, why, tt.why)
		}
	}
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(0), Status: st}
	b.Namespace, b.Name, b.Generation = "shop", "web", 1
	v, _ := Decide(b, Request{Namespace: "shop", Pod: "web-1", Op: v1alpha1.DisruptEvict, Verb: "evict"}, 0)
	want := `pod shop/web-1 may not be evicted now: PodUnavailableBudget shop/web allows no more disruptions, and none at any time (maxUnavailable is 0): a drain or a rollout of these pods never finishes. Loosen it (kubectl patch pub -n shop web --type merge -p '{"spec":{"maxUnavailable":1,"minAvailable":null}}') or delete it (kubectl delete pub -n shop web)`
	if v.Allowed || v.Message != want {
		t.Fatalf("got %q\nwant %q", v.Message, want)
	}
	// minAvailable at the pods there are now: said, without "at any time"
	// (a workload scaled up, or a bare pod back, allows again).
	three := intstr.FromInt32(3)
	b.Spec = v1alpha1.PodUnavailableBudgetSpec{Selector: b.Spec.Selector, MinAvailable: &three}
	v, _ = Decide(b, Request{Namespace: "shop", Pod: "web-1", Op: v1alpha1.DisruptDelete, Verb: "delete"}, 0)
	if v.Allowed || !strings.Contains(v.Message, "allows no more disruptions (3 of 3 pods available, 3 must stay available, 0 disruptions in progress); its minAvailable 3 keeps all 3 pods, so none may go until there are more. Wait") {
		t.Fatalf("got %q", v.Message)
	}
}

func TestPartitionThreshold(t *testing.T) {
	for _, tt := range []struct {
		nodes     NodeCount
		threshold float64
		want      bool
	}{
		{NodeCount{Total: 10, NotReady: 5}, 0, false}, // 50% < 55%
		{NodeCount{Total: 10, NotReady: 6}, 0, true},
		{NodeCount{Total: 10, NotReady: 5}, 0.5, true},
		{NodeCount{Total: 2, NotReady: 2}, 0, true},
		{NodeCount{Total: 1, NotReady: 1}, 0.1, false}, // one dead node never is
		{NodeCount{}, 0, false},
	} {
		if got := tt.nodes.Partitioned(tt.threshold); got != tt.want {
			t.Errorf("%+v at %v: partitioned %v, want %v", tt.nodes, tt.threshold, got, tt.want)
		}
	}
}

func TestGeneratedSize(t *testing.T) {
	roll := intstr.FromInt32(3)
	for _, tt := range []struct {
		ann      map[string]string
		roll     *intstr.IntOrString
		max, min string
		err      string
	}{
		{ann: nil, max: "25%"},
		{ann: nil, roll: &roll, max: "3"},
		{ann: map[string]string{v1alpha1.AnnotationGeneratePUBMaxUnavailable: "10%"}, roll: &roll, max: "10%"},
		{ann: map[string]string{v1alpha1.AnnotationGeneratePUBMinAvailable: "4"}, min: "4"},
		{ann: map[string]string{v1alpha1.AnnotationGeneratePUBMinAvailable: "x"}, err: "a count of 0 or more"},
		{ann: map[string]string{v1alpha1.AnnotationGeneratePUBMinAvailable: "1", v1alpha1.AnnotationGeneratePUBMaxUnavailable: "1"}, err: "not both"},
	} {
		mx, mn, err := GeneratedSize(tt.ann, tt.roll)
		got := func(v *intstr.IntOrString) string {
			if v == nil {
				return ""
			}
			return v.String()
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%v: err %v, want %q", tt.ann, err, tt.err)
			}
			continue
		}
		if err != nil || got(mx) != tt.max || got(mn) != tt.min {
			t.Errorf("%v: max %q min %q err %v, want %q %q", tt.ann, got(mx), got(mn), err, tt.max, tt.min)
		}
	}
}

func TestRestartsContainers(t *testing.T) {
	base := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}}}
	img := base.DeepCopy()
	img.Spec.Containers[0].Image = "web:2"
	res := base.DeepCopy()
	res.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	lbl := base.DeepCopy()
	lbl.Labels = map[string]string{"x": "y"}
	if !RestartsContainers(base, img) || !RestartsContainers(base, res) || RestartsContainers(base, lbl) {
		t.Fatal("image and resources restart containers; labels do not")
	}
	if !ResourcesDiffer(base, res) || ResourcesDiffer(base, img) {
		t.Fatal("ResourcesDiffer")
	}
}

func TestIndexCoveringAndCounts(t *testing.T) {
	x := NewIndex()
	web := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(1)}
	web.Namespace, web.Name = "shop", "web"
	all := &v1alpha1.PodUnavailableBudget{Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{}}}
	all.Namespace, all.Name = "shop", "all"
	all.Spec.IgnoredPodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"canary": "true"}}
	ref := &v1alpha1.PodUnavailableBudget{Spec: v1alpha1.PodUnavailableBudgetSpec{TargetRef: &v1alpha1.TargetReference{Kind: "Deployment", Name: "db"}}}
	ref.Namespace, ref.Name = "shop", "db"
	x.SetPod("shop", Pod{Name: "web-1", Labels: map[string]string{"app": "web"}, Ready: true})
	x.SetBudget(web)
	x.SetBudget(all)
	x.SetBudget(ref) // selector not resolved yet: covers nothing
	x.SetPod("shop", Pod{Name: "web-2", Labels: map[string]string{"app": "web", "canary": "true"}})
	x.SetPod("shop", Pod{Name: "db-1", Labels: map[string]string{"app": "db"}})
	keys := func(ks []Key) string { return fmt.Sprint(ks) }
	if got := keys(x.Covering("shop", map[string]string{"app": "web"})); got != "[shop/all shop/web]" {
		t.Fatalf("web pod covered by %s", got)
	}
	if got := keys(x.Covering("shop", map[string]string{"app": "web", "canary": "true"})); got != "[shop/web]" {
		t.Fatalf("ignored pod covered by %s", got)
	}
	ref.Status.Selector = "app=db"
	x.SetBudget(ref)
	if pods, _ := x.Pods(Key{"shop", "db"}); len(pods) != 1 || pods[0].Name != "db-1" {
		t.Fatalf("db budget pods %v", pods)
	}
	now, before := x.SetPod("shop", Pod{Name: "web-1", Labels: map[string]string{"app": "db"}})
	if keys(now) != "[shop/all shop/db]" || keys(before) != "[shop/all shop/web]" {
		t.Fatalf("relabelled pod: now %v before %v", now, before)
	}
	x.DeleteBudget(Key{"shop", "all"})
	if got := x.DeletePod("shop", "web-1"); keys(got) != "[shop/db]" {
		t.Fatalf("deleted pod was covered by %v", got)
	}
	if x.Covering("other", map[string]string{"app": "web"}) != nil || !x.HasBudgets("shop") || x.HasBudgets("other") {
		t.Fatal("namespaces")
	}
}

// BenchmarkCovering: finding a pod's budgets with 10 and with 10,000
// budgets in its namespace.
func BenchmarkCovering(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("budgets=%d", n), func(b *testing.B) {
			x := NewIndex()
			for i := range n {
				pub := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(1)}
				pub.Spec.Selector.MatchLabels = map[string]string{"app": fmt.Sprint("app-", i), "tier": "web"}
				pub.Namespace, pub.Name = "shop", fmt.Sprint("b-", i)
				x.SetBudget(pub)
			}
			l := map[string]string{"app": "app-7", "tier": "web", "pod-template-hash": "abc"}
			b.ResetTimer()
			for b.Loop() {
				if len(x.Covering("shop", l)) != 1 {
					b.Fatal("not covered")
				}
			}
		})
	}
}

// An eviction of a pod not Ready is recorded and stays in progress until
// its pod is seen going: the pod may turn Ready before the eviction lands,
// and must not count as available meanwhile. An update is done once its
// pod is not Ready.
func TestEvictionOfAnUnavailablePodStaysInProgressUntilItGoes(t *testing.T) {
	now := time.Now()
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(1)}
	b.Generation = 1
	Consume(b, Request{Pod: "a", UID: "ua", Op: v1alpha1.DisruptEvict}, now)
	Consume(b, Request{Pod: "b", UID: "ub", Op: v1alpha1.DisruptUpdate}, now)
	pods := []Pod{{Name: "a", UID: "ua", Created: now.Add(-time.Hour)}, {Name: "b", UID: "ub", Created: now.Add(-time.Hour)},
		{Name: "c", UID: "uc", Ready: true, Created: now.Add(-time.Hour)}}
	st, err := Compute(b, pods, 3, now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Disruptions["a"]; !ok || len(st.Disruptions) != 1 || st.DisruptionOps["a"] != v1alpha1.DisruptEvict {
		t.Fatalf("in progress: %v %v", st.Disruptions, st.DisruptionOps)
	}
	// Turned Ready before the eviction landed: still not available.
	pods[0].Ready = true
	b.Status = st
	if st, _ = Compute(b, pods, 3, now, 30*time.Second); st.CurrentAvailable != 1 || st.UnavailableAllowed != 0 {
		t.Fatalf("the evicted pod turned Ready counted available: %+v", st)
	}
	pods[0].Gone = true
	b.Status = st
	if st, _ = Compute(b, pods, 3, now, 30*time.Second); len(st.Disruptions) != 0 || st.DisruptionOps != nil || st.DisruptionUIDs != nil {
		t.Fatalf("seen going, still in progress: %+v", st)
	}
}

// While an eviction of a pod is in flight, nothing else may disrupt that
// pod: if it went another way first, the eviction would land on the pod
// that takes its name. A new pod of the name is decided as any other.
func TestNothingDisruptsAPodWhoseEvictionIsInFlight(t *testing.T) {
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(3)}
	b.Namespace, b.Name, b.Generation = "db", "store", 1
	b.Status = v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 3, CurrentAvailable: 3, UnavailableAllowed: 3}
	evict := Request{Namespace: "db", Pod: "store-0", Op: v1alpha1.DisruptEvict, Verb: "evict", UID: "u1"}
	Consume(b, evict, time.Now())
	del := evict
	del.Op, del.Verb = v1alpha1.DisruptDelete, "delete"
	if v, _ := Decide(b, del, 0); v.Allowed || !strings.Contains(v.Message, "an eviction of it admitted by PodUnavailableBudget db/store is in progress") {
		t.Fatalf("a delete while an eviction is in flight: %+v", v)
	}
	// The same eviction asked again (kubectl drain retrying one a
	// PodDisruptionBudget refused after Rampart admitted it) is free.
	if v, consume := Decide(b, evict, 0); !v.Allowed || consume {
		t.Fatalf("the same eviction again: %+v", v)
	}
	del.UID = "u2"
	if v, consume := Decide(b, del, 0); !v.Allowed || !consume {
		t.Fatalf("a new pod of the name: %+v", v)
	}
}

// An eviction of a pod already unavailable is admitted and counted: the
// status may be older than the pod's turn to not Ready and still count it
// available, so the next healthy pod waits for the status to be computed
// again rather than go beside it.
func TestFreeEvictionCountsAgainstAStaleStatus(t *testing.T) {
	now := time.Now()
	b := &v1alpha1.PodUnavailableBudget{Spec: maxUnavailable(1)}
	// Computed while web-2 was Ready: 3 of 3 available.
	b.Status = v1alpha1.PodUnavailableBudgetStatus{TotalReplicas: 3, CurrentAvailable: 3, DesiredAvailable: 2, UnavailableAllowed: 1}
	r := Request{Namespace: "ns", Pod: "web-2", Op: v1alpha1.DisruptEvict, Verb: "evict", Unavailable: "it is not Ready", UID: "u2"}
	v, consume := Decide(b, r, 0)
	if free, _ := Free(b, r, 0); !v.Allowed || !consume || !free {
		t.Fatalf("eviction of a pod not Ready: allowed %v, recorded %v, free %v", v.Allowed, consume, free)
	}
	Consume(b, r, now)
	if b.Status.UnavailableAllowed != 0 || b.Status.DisruptionOps["web-2"] != v1alpha1.DisruptEvict || b.Status.DisruptionUIDs["web-2"] != "u2" {
		t.Fatalf("after the free eviction: %+v", b.Status)
	}
	if v, _ := Decide(b, Request{Namespace: "ns", Pod: "web-0", Op: v1alpha1.DisruptEvict, Verb: "evict", UID: "u0"}, 0); v.Allowed {
		t.Fatal("a healthy pod's eviction admitted beside a free one the stale status did not count")
	}
	// Computed again, the budget counts what the pods say: web-2 is
	// missed until it is replaced.
	pods := []Pod{{Name: "web-0", Ready: true, UID: "u0"}, {Name: "web-1", Ready: true, UID: "u1"}}
	st, err := Compute(b, pods, 3, now, 30*time.Second)
	if err != nil || st.UnavailableAllowed != 0 {
		t.Fatalf("recomputed with web-2 gone: %+v %v", st, err)
	}
}
