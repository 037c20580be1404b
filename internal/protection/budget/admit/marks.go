package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

var indexReads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_budget_index_reads_total",
	Help: "How disruptions in namespaces holding budgets knew the budget index was current before judging, by way: marks (a live read of the namespace's change marks), fence (a write of the budget fence), list (a live list of the namespace's budgets).",
}, []string{"way"})

var markWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_budget_mark_writes_total",
	Help: "Writes of the change marks as budgets are created or their spec changed, by outcome (ok; failed: the change was refused, to be retried).",
}, []string{"outcome"})

func init() { metrics.Registry.MustRegister(indexReads, markWrites) }

// Marks writes and reads the change marks (see budget.MarksName): the
// objects webhook marks each budget creation and spec change before the
// API server stores it, and a disruption reads the marks of its namespace
// rather than listing its budgets or writing the fence.
type Marks struct {
	// Client reads and writes the marks directly.
	Client client.Client
	Index  *budget.Index
	// Timeout bounds one write, or one read and the wait for the index
	// (0: 2 s).
	Timeout time.Duration
	Clock   clock.PassiveClock
}

func (m *Marks) timeout() time.Duration {
	if m.Timeout > 0 {
		return m.Timeout
	}
	return 2 * time.Second
}

// Record marks the creation or spec change of budget ns/name, which the
// API server will store at this UID and generation, pruning the marks the
// index says may go (budget.Index.Prunable). The marks' budget is created
// when missing, owned as the fence is (so helm uninstall removes both).
func (m *Marks) Record(ctx context.Context, ns, name, uid string, generation int64) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout())
	defer cancel()
	now := rampartadmission.ClockOrReal(m.Clock).Now()
	k := m.Index.MarksKey(ns)
	key, value := budget.MarkAnnotation(name, uid, generation, now)
	annotations := map[string]any{key: value}
	for _, old := range m.Index.Prunable(ns, now) {
		if old != key {
			annotations[old] = nil // a merge patch's null removes it
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	b := &v1alpha1.PodUnavailableBudget{}
	b.Namespace, b.Name = k.Namespace, k.Name
	// No resourceVersion: the API server applies the patch to the marks as
	// they are, retrying its own conflicts, so that creations at once in
	// one namespace do not fail each other.
	err = m.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		if err = m.create(ctx, k, key, value); apierrors.IsAlreadyExists(err) {
			err = m.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, patch))
		}
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
		err = fmt.Errorf("marking the change of PodUnavailableBudget %s/%s in %s: %w", ns, name, k, err)
	}
	markWrites.WithLabelValues(outcome).Inc()
	return err
}

// create makes the marks' budget k holding one mark. Like the fence it
// covers no pod, and it is owned as the fence is.
func (m *Marks) create(ctx context.Context, k budget.Key, key, value string) error {
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name,
		Labels: map[string]string{budget.FenceLabel: "true", "app.kubernetes.io/managed-by": "rampart"},
		Annotations: map[string]string{key: value, "rampart.io/description": "Not a budget: Rampart's manager marks here each creation and " +
			"change of a PodUnavailableBudget in namespace " + k.Name[len(budget.MarksPrefix):] + " before the API server stores it, so that " +
			"every replica knows it has seen it before it judges a disruption. It covers no pod; deleting it is safe."}},
		Spec: fenceSpec()}
	fence := &metav1.PartialObjectMetadata{}
	fence.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("PodUnavailableBudget"))
	if f := m.Index.Fence(); f.Name != "" && m.Client.Get(ctx, client.ObjectKey{Namespace: f.Namespace, Name: f.Name}, fence) == nil {
		b.OwnerReferences = fence.OwnerReferences
	}
	return m.Client.Create(ctx, b)
}

// fenceSpec covers no pod: its selector requires a label both present and
// absent.
func fenceSpec() v1alpha1.PodUnavailableBudgetSpec {
	return v1alpha1.PodUnavailableBudgetSpec{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: budget.FenceLabel, Operator: metav1.LabelSelectorOpExists},
		{Key: budget.FenceLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}},
		MaxUnavailable: ptr.To(intstr.FromInt32(0))}
}

// covering are the budgets that cover a pod with these labels in ns, the
// index made current through ns's change marks (see budget.MarksName).
// found is false when ns has no marks (no budget was created or changed
// there since marks were turned on) or they could not be read: the caller
// lists or fences instead.
func (m *Marks) covering(ctx context.Context, ns string, podLabels map[string]string) (keys []budget.Key, unsure []string, found bool) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout())
	defer cancel()
	k := m.Index.MarksKey(ns)
	marks := &metav1.PartialObjectMetadata{}
	marks.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("PodUnavailableBudget"))
	// A GET without resourceVersion is read from etcd, not from the API
	// server's watch cache: the marks as they are now.
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, marks); err != nil {
		return nil, nil, false
	}
	if err := m.Index.WaitMarks(ctx, ns, marks.ResourceVersion); err != nil {
		return nil, nil, false
	}
	keys, unsure = m.Index.CoveringMarked(ns, podLabels, budget.ParseMarks(marks.Annotations))
	return keys, unsure, true
}
