package manager

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
)

// Budget namespaces are where the budget webhooks judge every pod
// disruption. A namespace joins before its first budget is admitted (the
// budget's admission pins it and waits: see coverNamespace), and leaves
// only when the leader has seen it without budgets for budgetNamespaceGrace
// and a live list agrees: a replica whose informer lags never drops a
// namespace another replica registered.
const (
	// budgetPinTTL is how long a pin keeps its namespace registered: long
	// enough for the budget being admitted to be stored and reach every
	// replica's index.
	budgetPinTTL         = 2 * time.Minute
	budgetNamespaceGrace = 30 * time.Second
)

// budgetNamespacePlan is the pure part: which namespaces to register, and
// which may leave if a live list finds no budget there.
func budgetNamespacePlan(indexed, registered []string, pins, emptySince map[string]time.Time, leader bool, now time.Time) (keep, mayDrop []string) {
	set := map[string]bool{}
	for _, ns := range indexed {
		set[ns] = true
	}
	for ns, at := range pins {
		if now.Sub(at) < budgetPinTTL {
			set[ns] = true
		}
	}
	for _, ns := range registered {
		if set[ns] {
			continue
		}
		if since, ok := emptySince[ns]; leader && ok && now.Sub(since) >= budgetNamespaceGrace {
			mayDrop = append(mayDrop, ns)
			continue
		}
		set[ns] = true
	}
	return slices.Sorted(maps.Keys(set)), mayDrop
}

// budgetNamespaces is the registrar's state about budget namespaces.
type budgetNamespaces struct {
	mu sync.Mutex
	// pins are this replica's: budgets being admitted.
	pins map[string]time.Time
	// emptySince: registered namespaces without a budget in the index.
	emptySince map[string]time.Time
	// began counts registration iterations begun; confirmed are the
	// namespaces the iteration begun as confirmedBy found registered (or
	// wrote).
	began, confirmedBy uint64
	confirmed          map[string]bool
	// done is closed and replaced after each registration iteration.
	done chan struct{}
}

func newBudgetNamespaces() *budgetNamespaces {
	return &budgetNamespaces{pins: map[string]time.Time{}, emptySince: map[string]time.Time{}, done: make(chan struct{})}
}

// pin adds ns and returns the iterations begun so far: only a later one
// is sure to include the pin.
func (b *budgetNamespaces) pin(ns string, now time.Time) (after uint64, done <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pins[ns] = now
	return b.began, b.done
}

// check says whether an iteration begun after `after` confirmed ns.
func (b *budgetNamespaces) check(ns string, after uint64) (ok bool, done <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.confirmedBy > after && b.confirmed[ns], b.done
}

// begin marks an iteration's start and returns its number and the pins to
// write.
func (b *budgetNamespaces) begin(now time.Time) (uint64, map[string]time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.began++
	for ns, at := range b.pins {
		if now.Sub(at) >= budgetPinTTL {
			delete(b.pins, ns)
		}
	}
	return b.began, maps.Clone(b.pins)
}

// end records what iteration n found registered (or wrote).
func (b *budgetNamespaces) end(n uint64, registered []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.confirmedBy = n
	b.confirmed = map[string]bool{}
	for _, ns := range registered {
		b.confirmed[ns] = true
	}
	close(b.done)
	b.done = make(chan struct{})
}

// plan computes the namespaces to register from the live configuration.
func (r *registrar) planBudgetNamespaces(ctx context.Context, live *admissionregistrationv1.ValidatingWebhookConfiguration, ownPins map[string]time.Time, now time.Time) (namespaces []string, pins map[string]time.Time) {
	registered, livePins := rampartadmission.RegisteredBudgetNamespaces(live)
	pins = map[string]time.Time{}
	for ns, at := range livePins {
		if now.Sub(at) < budgetPinTTL {
			pins[ns] = at
		}
	}
	for ns, at := range ownPins {
		if pins[ns].Before(at) {
			pins[ns] = at
		}
	}
	indexed := r.view.Budgets().Namespaces()
	leader := false
	select {
	case <-r.elected:
		leader = true
	default:
	}
	r.budgetNS.mu.Lock()
	for _, ns := range registered {
		if slices.Contains(indexed, ns) {
			delete(r.budgetNS.emptySince, ns)
		} else if _, ok := r.budgetNS.emptySince[ns]; !ok {
			r.budgetNS.emptySince[ns] = now
		}
	}
	keep, mayDrop := budgetNamespacePlan(indexed, registered, pins, r.budgetNS.emptySince, leader, now)
	r.budgetNS.mu.Unlock()
	for _, ns := range mayDrop {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("PodUnavailableBudgetList"))
		if err := r.client.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil || len(list.Items) > 0 {
			keep = append(keep, ns)
		}
	}
	slices.Sort(keep)
	return keep, pins
}

// readValidating is the registered validating configuration (empty if
// none yet).
func (r *registrar) readValidating(ctx context.Context) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, live)
	if apierrors.IsNotFound(err) {
		return &admissionregistrationv1.ValidatingWebhookConfiguration{}, nil
	}
	return live, err
}

// coverNamespace returns once the registered validating configuration
// judges every pod disruption in ns and the API server enforces it: the
// admission of a namespace's budget waits for it, so that the budget holds
// from the moment it is stored.
func (r *registrar) coverNamespace(ctx context.Context, ns string) error {
	after, done := r.budgetNS.pin(ns, time.Now())
	r.poke()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
		}
		var ok bool
		if ok, done = r.budgetNS.check(ns, after); ok {
			break
		}
		r.poke()
	}
	return rampartadmission.WaitBudgetCoverage(ctx, r.clientset, ns)
}
