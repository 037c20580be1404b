package admit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
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

var markOverflows = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "rampart_budget_marks_overflows_total",
	Help: "Times a namespace's change marks would have grown past budget.MaxMarks and were cleared: disruptions there list or fence for the next five minutes.",
})

func init() { metrics.Registry.MustRegister(indexReads, markWrites, markOverflows) }

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
	// Max is the most marks kept in a namespace (0: budget.MaxMarks).
	Max int

	mu      sync.Mutex
	next    map[string]*markRound // by namespace, the marks waiting for a write
	writing map[string]bool
}

func (m *Marks) timeout() time.Duration {
	if m.Timeout > 0 {
		return m.Timeout
	}
	return 2 * time.Second
}

// Record marks the creation or spec change of budget ns/name, which the
// API server will store at this UID and generation, and returns once the
// mark is written. Records that arrive while a write for ns is out share
// the next one, so a burst of creations in one namespace costs a write per
// round trip, not one each.
func (m *Marks) Record(ctx context.Context, ns, name, uid string, generation int64) error {
	key, value := budget.MarkAnnotation(name, uid, generation, rampartadmission.ClockOrReal(m.Clock).Now())
	m.mu.Lock()
	if m.next == nil {
		m.next, m.writing = map[string]*markRound{}, map[string]bool{}
	}
	r := m.next[ns]
	if r == nil {
		r = &markRound{marks: map[string]string{}, done: make(chan struct{})}
		m.next[ns] = r
	}
	r.marks[key] = value
	if !m.writing[ns] {
		m.writing[ns] = true
		go m.run(ns)
	}
	m.mu.Unlock()
	select {
	case <-r.done:
		if r.err != nil {
			return fmt.Errorf("marking the change of PodUnavailableBudget %s/%s: %w", ns, name, r.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type markRound struct {
	marks map[string]string
	done  chan struct{}
	err   error
}

// run writes the marks gathered for ns, then those gathered meanwhile,
// until none wait.
func (m *Marks) run(ns string) {
	for {
		m.mu.Lock()
		r := m.next[ns]
		delete(m.next, ns)
		if r == nil {
			delete(m.writing, ns)
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		r.err = m.write(ns, r.marks)
		outcome := "ok"
		if r.err != nil {
			outcome = "failed"
		}
		markWrites.WithLabelValues(outcome).Inc()
		close(r.done)
	}
}

// write adds marks to ns's, removing those the index says may go
// (budget.Index.Prunable). The marks' budget is created when missing,
// owned as the fence is (so helm uninstall removes both).
func (m *Marks) write(ns string, marks map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout())
	defer cancel()
	k := m.Index.MarksKey(ns)
	now := rampartadmission.ClockOrReal(m.Clock).Now()
	annotations := map[string]any{}
	prunable := m.Index.Prunable(ns, now)
	for _, old := range prunable {
		annotations[old] = nil // a merge patch's null removes it
	}
	for key, value := range marks {
		annotations[key] = value
	}
	if kept := len(m.Index.Marks(ns)) - len(prunable) + len(marks); kept > cmp.Or(m.Max, budget.MaxMarks) {
		// Too many to keep: remove them all and say so; readers list or
		// fence meanwhile (budget.MarksOverflow).
		for _, old := range m.Index.Marks(ns) {
			annotations[old.Annotation] = nil
		}
		for key := range marks {
			annotations[key] = nil
		}
		annotations[budget.MarksOverflow] = strconv.FormatInt(now.Unix(), 10)
		markOverflows.Inc()
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	b := &v1alpha1.PodUnavailableBudget{}
	b.Namespace, b.Name = k.Namespace, k.Name
	// No resourceVersion: the API server applies the patch to the marks as
	// they are, retrying its own conflicts, so that replicas writing at
	// once do not fail each other.
	err = m.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, patch))
	if apierrors.IsNotFound(err) {
		if err = m.create(ctx, k, marks); apierrors.IsAlreadyExists(err) {
			err = m.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, patch))
		}
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", k, err)
	}
	return nil
}

// create makes the marks' budget k holding one mark. Like the fence it
// covers no pod, and it is owned as the fence is.
func (m *Marks) create(ctx context.Context, k budget.Key, marks map[string]string) error {
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name,
		Labels: map[string]string{budget.FenceLabel: "true", "app.kubernetes.io/managed-by": "rampart"},
		Annotations: map[string]string{"rampart.io/description": "Not a budget: Rampart's manager marks here each creation and " +
			"change of a PodUnavailableBudget in namespace " + k.Name[len(budget.MarksPrefix):] + " before the API server stores it, so that " +
			"every replica knows it has seen it before it judges a disruption. It covers no pod; deleting it is safe."}},
		Spec: fenceSpec()}
	maps.Copy(b.Annotations, marks)
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
	if budget.Overflowed(marks.Annotations, rampartadmission.ClockOrReal(m.Clock).Now()) {
		return nil, nil, false
	}
	if err := m.Index.WaitMarks(ctx, ns, marks.ResourceVersion); err != nil {
		return nil, nil, false
	}
	keys, unsure = m.Index.CoveringMarked(ns, podLabels, budget.ParseMarks(marks.Annotations))
	return keys, unsure, true
}

// PruneMarks deletes the change marks of the namespaces that no longer
// exist (checked live), which would otherwise outlive them. Deleting marks
// is safe at any time: disruptions there list or fence until the next
// budget change writes them again, so a namespace created again meanwhile
// loses nothing.
func PruneMarks(ctx context.Context, c client.Client, x *budget.Index) (deleted int, err error) {
	for _, ns := range x.MarkedNamespaces() {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
		if err := c.List(ctx, list, client.MatchingFields{"metadata.name": ns}); err != nil {
			return deleted, fmt.Errorf("looking for namespace %s: %w", ns, err)
		}
		if len(list.Items) > 0 {
			continue
		}
		k := x.MarksKey(ns)
		b := &v1alpha1.PodUnavailableBudget{}
		b.Namespace, b.Name = k.Namespace, k.Name
		if err := c.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return deleted, fmt.Errorf("deleting the change marks %s of a namespace gone: %w", k, err)
		}
		deleted++
	}
	return deleted, nil
}
