package budget

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func marksBudget(ns, rv string, marks ...Mark) *v1alpha1.PodUnavailableBudget {
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "rampart-system", Name: MarksName(ns), ResourceVersion: rv,
		Annotations: map[string]string{"rampart.io/description": "not a mark", "changes.rampart.io/garbage": "x"}},
		Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{}}}
	for _, m := range marks {
		k, v := MarkAnnotation(m.Name, m.UID, m.Generation, m.At)
		b.Annotations[k] = v
	}
	return b
}

func webBudget(uid string, gen int64) *v1alpha1.PodUnavailableBudget {
	return &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid), Generation: gen},
		Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
}

// A namespace's change marks are never filed as a budget; a reader learns
// from them which budgets the index may lack (marked at a UID or
// generation it has not filed, or not resolved), and waits until the
// index has filed the marks it read.
func TestChangeMarksNameWhatTheIndexLacks(t *testing.T) {
	x := NewIndex()
	x.SetFence(Key{"rampart-system", "rampart-fence"}, 0)
	if x.Marking() {
		t.Fatal("marking is on before SetMarking")
	}
	x.SetMarking(true)
	if !x.Marking() || x.MarksKey("shop") != (Key{"rampart-system", "rampart-changes.shop"}) {
		t.Fatalf("Marking %v, MarksKey %v", x.Marking(), x.MarksKey("shop"))
	}
	if !x.IsOwn("rampart-system", "rampart-changes.shop") || !x.IsOwn("rampart-system", "rampart-fence") ||
		x.IsOwn("shop", "rampart-changes.shop") || x.IsOwn("rampart-system", "rampart-changes.") {
		t.Fatal("IsOwn names the wrong budgets")
	}
	now := time.Unix(1_800_000_000, 0)
	x.SetBudget(webBudget("u1", 1))
	web := map[string]string{"app": "web"}
	if x.SetBudget(marksBudget("shop", "100", Mark{Name: "web", UID: "u1", Generation: 2, At: now})) ||
		x.HasBudgets("rampart-system") || x.Count("rampart-system") != 0 || slices.Contains(x.Namespaces(), "rampart-system") {
		t.Fatal("the marks were filed as a budget")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := x.WaitMarks(ctx, "shop", "100"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		marks  []Mark
		keys   []Key
		unsure []string
	}{
		{"no marks", nil, []Key{{"shop", "web"}}, nil},
		{"filed at the marked generation", []Mark{{Name: "web", UID: "u1", Generation: 1}}, []Key{{"shop", "web"}}, nil},
		{"a change not filed yet", []Mark{{Name: "web", UID: "u1", Generation: 2}}, nil, []string{"web"}},
		{"deleted and created again", []Mark{{Name: "web", UID: "u2", Generation: 1}}, nil, []string{"web"}},
		{"a new budget", []Mark{{Name: "db", UID: "u3", Generation: 1}}, []Key{{"shop", "web"}}, []string{"db"}},
	}
	for _, c := range cases {
		keys, unsure := x.CoveringMarked("shop", web, c.marks)
		if !slices.Equal(keys, c.keys) || !slices.Equal(unsure, c.unsure) {
			t.Errorf("%s: keys %v unsure %v, want %v and %v", c.name, keys, unsure, c.keys, c.unsure)
		}
	}
	if _, unsure := x.CoveringMarked("elsewhere", web, []Mark{{Name: "a", UID: "u", Generation: 1}}); !slices.Equal(unsure, []string{"a"}) {
		t.Errorf("a mark in a namespace the index has nothing of: unsure %v", unsure)
	}

	// Pruning: the change filed, or a mark too old to matter.
	if p := x.Prunable("shop", now); len(p) != 0 {
		t.Fatalf("pruned %v before the change was filed", p)
	}
	x.SetBudget(webBudget("u1", 2))
	k, _ := MarkAnnotation("web", "u1", 2, now)
	if p := x.Prunable("shop", now); !slices.Equal(p, []string{k}) {
		t.Fatalf("Prunable = %v, want [%s]", p, k)
	}
	x.SetBudget(marksBudget("shop", "101", Mark{Name: "gone", UID: "u4", Generation: 1, At: now}))
	if p := x.Prunable("shop", now.Add(MarkKeptFor-time.Second)); len(p) != 0 {
		t.Fatalf("pruned %v, a mark of a budget not seen, before MarkKeptFor", p)
	}
	if p := x.Prunable("shop", now.Add(MarkKeptFor+time.Second)); len(p) != 1 {
		t.Fatalf("Prunable after MarkKeptFor = %v, want the old mark", p)
	}

	// Waiting: a newer write of the marks, filed later; an older event
	// does not move them back.
	done := make(chan error, 1)
	go func() { done <- x.WaitMarks(ctx, "shop", "120") }()
	select {
	case err := <-done:
		t.Fatalf("returned (%v) before the marks were filed at 120", err)
	case <-time.After(50 * time.Millisecond):
	}
	x.SetBudget(marksBudget("shop", "130"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	x.SetBudget(marksBudget("shop", "125"))
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := x.WaitMarks(short, "shop", "130"); err != nil {
		t.Fatalf("an older event moved the marks back: %v", err)
	}
	x.DeleteBudget(x.MarksKey("shop"))
	if err := x.WaitMarks(short, "shop", "130"); err == nil {
		t.Fatal("the marks, deleted, still count as filed")
	}
}

func TestParseMarksReadsWhatMarkAnnotationWrites(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	long := "a-very-long-budget-name-that-is-longer-than-sixty-three-characters-which-a-key-could-not-hold"
	k, v := MarkAnnotation(long, "0b1c6f8e-7d1a-4c5e-9a2b-3f4e5d6c7b8a", 12, at)
	got := ParseMarks(map[string]string{k: v, "changes.rampart.io/no-generation": "1 x", "changes.rampart.io/u.1": "no-time", "other": "1 y"})
	want := []Mark{{Annotation: k, Name: long, UID: "0b1c6f8e-7d1a-4c5e-9a2b-3f4e5d6c7b8a", Generation: 12, At: at}}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseMarks = %+v, want %+v", got, want)
	}
	if ParseMarks(map[string]string{MarksOverflow: "1800000000"}) != nil {
		t.Fatal("the overflow annotation parsed as a mark")
	}
	for _, c := range []struct {
		v    string
		now  time.Time
		want bool
	}{{"1800000000", at.Add(time.Minute), true}, {"1800000000", at.Add(MarkKeptFor + time.Second), false}, {"soon", at, true}} {
		if got := Overflowed(map[string]string{MarksOverflow: c.v}, c.now); got != c.want {
			t.Errorf("Overflowed(%q) at %v = %v, want %v", c.v, c.now, got, c.want)
		}
	}
	if Overflowed(nil, at) {
		t.Error("marks without the overflow annotation overflowed")
	}
	if len(k[len("changes.rampart.io/"):]) > 63 {
		t.Fatalf("annotation key %q: its name is over 63 characters", k)
	}
}
