package admit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// FenceName is the fence budget in the manager's namespace (see
// budget.Index.SetFence).
const FenceName = "rampart-fence"

// FenceAnnotation is what a fence write changes.
const FenceAnnotation = "rampart.io/fence"

var fenceWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_budget_fence_writes_total",
	Help: "Writes of the budget fence (each orders the budget index against the API server for the disruptions waiting on it), by outcome (ok, failed: those disruptions listed their namespace's budgets live instead).",
}, []string{"outcome"})

func init() { metrics.Registry.MustRegister(fenceWrites) }

// Fence makes the budget index as current as the API server for a
// disruption: it writes the fence budget and waits for the index to file
// that write (budget.Index.WaitFence). Disruptions that arrive while a
// write is out share the next one, so a storm of evictions costs one
// write per round trip, not one each.
type Fence struct {
	// Client writes the fence, directly to the API server.
	Client client.Client
	Index  *budget.Index
	// Timeout bounds one write and the wait for it (0: 2 s).
	Timeout time.Duration

	id  string
	seq atomic.Uint64

	mu      sync.Mutex
	writing bool
	next    *fenceRound
}

type fenceRound struct {
	done chan struct{}
	err  error
}

// Pass returns once every budget change the API server accepted before
// the call is filed in the index, or an error (the caller reads the API
// server instead).
func (f *Fence) Pass(ctx context.Context) error {
	f.mu.Lock()
	if f.next == nil {
		f.next = &fenceRound{done: make(chan struct{})}
	}
	r := f.next
	if !f.writing {
		f.writing = true
		go f.run()
	}
	f.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run writes the fence for the round waiting, then for the one that
// gathered meanwhile, until none waits.
func (f *Fence) run() {
	for {
		f.mu.Lock()
		r := f.next
		f.next = nil
		if r == nil {
			f.writing = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		r.err = f.write()
		outcome := "ok"
		if r.err != nil {
			outcome = "failed"
		}
		fenceWrites.WithLabelValues(outcome).Inc()
		close(r.done)
	}
}

func (f *Fence) write() error {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	k := f.Index.Fence()
	if k.Name == "" {
		return fmt.Errorf("no budget fence is set")
	}
	if f.id == "" {
		f.id = rand.String(8) // tells this replica's writes from the others'
	}
	b := &v1alpha1.PodUnavailableBudget{}
	b.Namespace, b.Name = k.Namespace, k.Name
	// A new value each time: a patch that changes nothing writes nothing,
	// and no event would come back.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%s-%d"}}}`, FenceAnnotation, f.id, f.seq.Add(1))
	if err := f.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("writing the budget fence %s: %w", k, err)
	}
	return f.Index.WaitFence(ctx, b.ResourceVersion)
}

// +kubebuilder:rbac:groups=rampart.io,resources=podunavailablebudgets,verbs=create;patch

// EnsureFence creates the fence budget in namespace ns if it is missing,
// owned by owner if set (the chart's ClusterRole: helm uninstall removes
// it as it does the webhook configuration). It covers no pod: its
// selector requires a label both present and absent.
func EnsureFence(ctx context.Context, c client.Client, ns string, owner *metav1.OwnerReference) error {
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: FenceName,
		Labels: map[string]string{budget.FenceLabel: "true", "app.kubernetes.io/managed-by": "rampart"},
		Annotations: map[string]string{"rampart.io/description": "Not a budget: Rampart's manager writes it to know its view of the budgets " +
			"is current before it judges a disruption. It covers no pod; deleting it is safe (the manager creates it again)."}},
		Spec: fenceSpec()}
	if owner != nil {
		b.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := c.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the budget fence %s/%s: %w", ns, FenceName, err)
	}
	return nil
}
