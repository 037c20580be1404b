package admit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// A budget marked but not filed by this replica's index is still found
// (read live); the marks' budget is created owned as the fence is, and a
// later mark prunes those the index has filed since. Pure logic: the real
// API server's side is TestBudgetHoldsFromCreationWithSeveralReplicas and
// TestBudgetChangeHoldsAtOnce.
func TestMarksFindWhatTheIndexHasNotFiled(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	x := budget.NewIndex()
	x.SetFence(budget.Key{Namespace: "rampart-system", Name: FenceName}, 0)
	x.SetMarking(true)
	// The informer: the marks' writes are filed at once (the budgets'
	// only when the test says).
	var writes atomic.Int64
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, o, opts...); err != nil {
				return err
			}
			if b, ok := o.(*v1alpha1.PodUnavailableBudget); ok && x.IsOwn(b.Namespace, b.Name) {
				writes.Add(1)
				x.SetBudget(b.DeepCopy())
			}
			return nil
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := c.Patch(ctx, o, p, opts...); err != nil {
				return err
			}
			writes.Add(1)
			x.SetBudget(o.(*v1alpha1.PodUnavailableBudget).DeepCopy())
			return nil
		},
	}).Build()
	ctx := context.Background()
	owner := metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "rampart-manager", UID: "cr-1"}
	if err := EnsureFence(ctx, c, "rampart-system", &owner); err != nil {
		t.Fatal(err)
	}
	m := &Marks{Client: c, Index: x}
	h := &Budgets{Client: c, Index: x, Marks: m}
	web := map[string]string{"app": "web"}

	if _, _, found := m.covering(ctx, "shop", web); found {
		t.Fatal("marks found in a namespace where nothing was marked")
	}
	// The webhook marks the creation, then the API server stores it; this
	// replica's informer has not delivered it.
	if err := m.Record(ctx, "shop", "web", "u1", 1); err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1", Generation: 1},
		Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: web}}}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	keys, err := h.covering(ctx, "shop", web)
	if err != nil || !slices.Equal(keys, []budget.Key{{Namespace: "shop", Name: "web"}}) {
		t.Fatalf("covering = %v, %v; want shop/web, read live", keys, err)
	}
	if keys, _ := h.covering(ctx, "shop", map[string]string{"app": "db"}); len(keys) != 0 {
		t.Fatalf("covering a pod the budget does not select = %v", keys)
	}
	var marks v1alpha1.PodUnavailableBudget
	if err := c.Get(ctx, client.ObjectKey{Namespace: "rampart-system", Name: "rampart-changes.shop"}, &marks); err != nil {
		t.Fatal(err)
	}
	if len(marks.OwnerReferences) != 1 || marks.OwnerReferences[0].UID != "cr-1" || marks.Labels[budget.FenceLabel] != "true" {
		t.Fatalf("marks' owners %v labels %v: want the fence's owner and the fence label", marks.OwnerReferences, marks.Labels)
	}
	if n := len(budget.ParseMarks(marks.Annotations)); n != 1 {
		t.Fatalf("%d marks, want 1", n)
	}

	// Filed now: the next mark prunes it.
	x.SetBudget(b)
	if err := m.Record(ctx, "shop", "db", "u2", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "rampart-system", Name: "rampart-changes.shop"}, &marks); err != nil {
		t.Fatal(err)
	}
	if got := budget.ParseMarks(marks.Annotations); len(got) != 1 || got[0].Name != "db" {
		t.Fatalf("marks after the second = %+v, want db's alone", got)
	}
	keys, unsure, found := m.covering(ctx, "shop", web)
	if !found || !slices.Equal(keys, []budget.Key{{Namespace: "shop", Name: "web"}}) || !slices.Equal(unsure, []string{"db"}) {
		t.Fatalf("covering through the marks = %v unsure %v found %v; want shop/web filed and db unsure", keys, unsure, found)
	}

	// A burst of 50 creations in one namespace shares a few writes, and
	// every mark is there when its Record returns.
	before := writes.Load()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Record(ctx, "burst", fmt.Sprint("b-", i), fmt.Sprint("u-", i), 1); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := c.Get(ctx, client.ObjectKey{Namespace: "rampart-system", Name: "rampart-changes.burst"}, &marks); err != nil {
		t.Fatal(err)
	}
	if n, w := len(budget.ParseMarks(marks.Annotations)), writes.Load()-before; n != 50 || w < 1 || w > 10 {
		t.Fatalf("50 concurrent marks: %d kept in %d writes; want 50 in 1 to 10", n, w)
	}

	// Past the most kept (none of those 50 filed): cleared, and readers
	// list or fence for a while.
	m.Max = 50
	if err := m.Record(ctx, "burst", "one-more", "u-51", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "rampart-system", Name: "rampart-changes.burst"}, &marks); err != nil {
		t.Fatal(err)
	}
	if n := len(budget.ParseMarks(marks.Annotations)); n != 0 || marks.Annotations[budget.MarksOverflow] == "" {
		t.Fatalf("after overflowing: %d marks, overflow %q; want none and the time", n, marks.Annotations[budget.MarksOverflow])
	}
	if _, _, found := m.covering(ctx, "burst", web); found {
		t.Fatal("marks that overflowed a moment ago were used")
	}
}

// Against the real API server and Rampart's managers: the objects webhook
// marks a budget's creation and each change of its spec at the UID and
// generation the API server stores; an index that has filed those marks
// but not the budget (an informer behind) finds the budget by reading it
// live, through the marks alone; a change of metadata only is not marked.
func TestMarksOnTheAPIServer(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	web := map[string]string{"app": "web"}
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: web}, MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	marksOf := func() *v1alpha1.PodUnavailableBudget {
		t.Helper()
		m := &v1alpha1.PodUnavailableBudget{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: localcluster.ManagerNamespace, Name: budget.MarksName(ns)}, m); err != nil {
			t.Fatalf("the marks of namespace %s: %v", ns, err)
		}
		return m
	}
	has := func(m *v1alpha1.PodUnavailableBudget, uid string, gen int64) bool {
		for _, k := range budget.ParseMarks(m.Annotations) {
			if k.Name == "web" && k.UID == uid && k.Generation == gen {
				return true
			}
		}
		return false
	}
	// The mark is there once the create returns: no waiting.
	if m := marksOf(); !has(m, string(b.UID), 1) {
		t.Fatalf("no mark of web at UID %s generation 1: %v", b.UID, m.Annotations)
	}

	// A replica whose informer has delivered the marks, not the budget.
	x := budget.NewIndex()
	x.SetFence(budget.Key{Namespace: localcluster.ManagerNamespace, Name: FenceName}, 0)
	x.SetMarking(true)
	m := &Marks{Client: c, Index: x}
	h := &Budgets{Client: c, Index: x, Marks: m}
	x.SetBudget(marksOf())
	keys, unsure, found := m.covering(ctx, ns, web)
	if !found || len(keys) != 0 || !slices.Equal(unsure, []string{"web"}) {
		t.Fatalf("through the marks: keys %v unsure %v found %v; want web unsure", keys, unsure, found)
	}
	if keys, err := h.covering(ctx, ns, web); err != nil || !slices.Equal(keys, []budget.Key{{Namespace: ns, Name: "web"}}) {
		t.Fatalf("covering = %v, %v; want %s/web, read live", keys, err, ns)
	}

	// Its spec changed: a new mark at generation 2; a label alone: none.
	x.SetBudget(b.DeepCopy())
	if err := c.Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"maxUnavailable":0}}`))); err != nil {
		t.Fatal(err)
	}
	if b.Generation != 2 || !has(marksOf(), string(b.UID), 2) {
		t.Fatalf("after a change of spec (generation %d): no mark at generation 2: %v", b.Generation, marksOf().Annotations)
	}
	x.SetBudget(marksOf())
	if _, unsure, _ := m.covering(ctx, ns, web); !slices.Equal(unsure, []string{"web"}) {
		t.Fatalf("the index filed generation 1, the marks say 2: unsure %v, want web", unsure)
	}
	rv := marksOf().ResourceVersion
	if err := c.Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"shop"}}}`))); err != nil {
		t.Fatal(err)
	}
	if got := marksOf().ResourceVersion; got != rv || b.Generation != 2 {
		t.Fatalf("a change of labels alone wrote the marks (resourceVersion %s, was %s; generation %d)", got, rv, b.Generation)
	}

	// The leader deletes the marks of namespaces gone, and only those.
	if n, err := PruneMarks(ctx, c, x); err != nil || n != 0 {
		t.Fatalf("PruneMarks with the namespace there: %d deleted, %v", n, err)
	}
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("namespace %s never went", ns)
	}
	if n, err := PruneMarks(ctx, c, x); err != nil || n != 1 {
		t.Fatalf("PruneMarks with the namespace gone: %d deleted, %v; want 1", n, err)
	}
	gone := &v1alpha1.PodUnavailableBudget{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: localcluster.ManagerNamespace, Name: budget.MarksName(ns)}, gone); !apierrors.IsNotFound(err) {
		t.Fatalf("the marks of a namespace gone are still there: %v", err)
	}
}
