package budgetstatus

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
	"github.com/rampart-io/rampart/internal/protection/protections"
)

// A budget is Ready only once the budget and eviction webhooks reach its
// namespace, on every local replica.
func TestEvictionsJudgedOnlyWhereTheWebhooksReach(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reg := rampartadmission.Registration{Protections: protections.All(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1,
		Replicas: []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}}, OwnNamespace: "rampart-system"}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(s).Build()}
	if r.evictionsJudged(ctx, "shop") {
		t.Error("judged with no configuration")
	}
	reg = reg.WithKeys(pub.NamespaceKeys, "other")
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(rampartadmission.ValidatingConfig(reg)).Build()
	if r.evictionsJudged(ctx, "shop") {
		t.Error("judged while the webhooks reach only another namespace")
	}
	reg = reg.WithKeys(pub.NamespaceKeys, "other", "shop")
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(rampartadmission.ValidatingConfig(reg)).Build()
	if !r.evictionsJudged(ctx, "shop") {
		t.Error("not judged once the webhooks reach the namespace")
	}
}

// A budget that can never allow a disruption is flagged: a condition, the
// gauge, and one Warning Event when it starts; loosened, all three go.
func TestBudgetThatBlocksAllDisruptionsIsFlagged(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Recorder: rec}
	zero := intstr.FromInt32(0)
	b := &v1alpha1.PodUnavailableBudget{Spec: v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: &zero}}
	b.Namespace, b.Name, b.Generation = "shop", "web", 1
	b.Status = v1alpha1.PodUnavailableBudgetStatus{ObservedGeneration: 1, TotalReplicas: 3, CurrentAvailable: 3, DesiredAvailable: 3}
	gauge := func() float64 { return testutil.ToFloat64(blocksAll.WithLabelValues("shop", "web")) }
	for range 2 { // computed again: one Event, not one per reconcile
		r.markBlocksAll(b, true)
	}
	c := meta.FindStatusCondition(b.Status.Conditions, BlocksAllCondition)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "allows no disruption at any time (maxUnavailable is 0)") {
		t.Fatalf("condition %+v", c)
	}
	if g := gauge(); g != 1 {
		t.Fatalf("gauge %v", g)
	}
	if len(rec.Events) != 1 || !strings.Contains(<-rec.Events, "Warning BudgetBlocksAllDisruptions") {
		t.Fatalf("want one Warning Event, got %d", len(rec.Events)+1)
	}
	one := intstr.FromInt32(1)
	b.Spec.MaxUnavailable = &one
	r.markBlocksAll(b, true)
	if meta.FindStatusCondition(b.Status.Conditions, BlocksAllCondition) != nil {
		t.Fatal("condition kept after the budget was loosened")
	}
	if n := testutil.CollectAndCount(blocksAll); n != 0 {
		t.Fatalf("%d gauge series left", n)
	}
}
