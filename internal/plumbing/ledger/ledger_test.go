package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// The tests keep a count in a PodUnavailableBudget's status: each admitted
// request is an entry of status.disruptions, keyed by its ID, and
// status.unavailableAllowed is what is left.

var key = client.ObjectKey{Namespace: "shop", Name: "web"}

func newBudget(allowed int32) *v1alpha1.PodUnavailableBudget {
	return &v1alpha1.PodUnavailableBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Status:     v1alpha1.PodUnavailableBudgetStatus{UnavailableAllowed: allowed},
	}
}

func newClient(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.PodUnavailableBudget{}).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

func newLedger(c client.Client, clk *clocktesting.FakeClock) *Ledger[*v1alpha1.PodUnavailableBudget] {
	return &Ledger[*v1alpha1.PodUnavailableBudget]{Client: c, Clock: clk,
		New: func() *v1alpha1.PodUnavailableBudget { return &v1alpha1.PodUnavailableBudget{} }}
}

// take is the decision under test: admit while something is left, and
// admit without counting a request already in the status.
func take(id string, calls *int) func(b *v1alpha1.PodUnavailableBudget) (Decision, error) {
	return func(b *v1alpha1.PodUnavailableBudget) (Decision, error) {
		*calls++
		if _, ok := b.Status.Disruptions[id]; ok {
			return Decision{Verdict: verdict.Allow}, nil
		}
		if b.Status.UnavailableAllowed <= 0 {
			return Decision{}, nil
		}
		if b.Status.Disruptions == nil {
			b.Status.Disruptions = map[string]metav1.Time{}
		}
		b.Status.Disruptions[id] = metav1.Now()
		b.Status.UnavailableAllowed--
		return Decision{Verdict: verdict.Allow, Write: true}, nil
	}
}

func stored(t *testing.T, c client.Client) *v1alpha1.PodUnavailableBudget {
	t.Helper()
	b := &v1alpha1.PodUnavailableBudget{}
	if err := c.Get(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAdmittedRequestIsWrittenOnceAndRemembered(t *testing.T) {
	var updates atomic.Int32
	c := newClient(t, &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
		updates.Add(1)
		return c.SubResource(sub).Update(ctx, o, opts...)
	}}, newBudget(2))
	clk := clocktesting.NewFakeClock(time.Now())
	l := newLedger(c, clk)
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || !out.Allowed || !out.Written {
		t.Fatalf("first ask: %+v, %v; want allowed and written", out, err)
	}
	out, err = l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || !out.Allowed || !out.Repeated || calls != 1 || updates.Load() != 1 {
		t.Fatalf("same request asked again: %+v, %v, %d decisions, %d writes; want allowed from memory, 1 decision, 1 write", out, err, calls, updates.Load())
	}
	// Forgotten after RememberFor: decided again, on the status, which
	// still holds it (no second count).
	clk.Step(RememberFor)
	out, err = l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || !out.Allowed || out.Repeated || out.Written {
		t.Fatalf("after the memory expired: %+v, %v; want allowed by the status, nothing written", out, err)
	}
	if b := stored(t, c); b.Status.UnavailableAllowed != 1 || len(b.Status.Disruptions) != 1 {
		t.Fatalf("status %+v; want one request counted", b.Status)
	}
}

func TestAnotherReplicaWritesBetweenReadAndWrite(t *testing.T) {
	var raced atomic.Bool
	var other *Ledger[*v1alpha1.PodUnavailableBudget]
	c := newClient(t, &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
		if !raced.Swap(true) {
			// The other replica takes the last unit first.
			calls := 0
			if out, err := other.Decide(ctx, Request{Object: key, ID: "theirs"}, take("theirs", &calls)); err != nil || !out.Written {
				return errors.Join(errors.New("the other replica's write failed"), err)
			}
		}
		return c.SubResource(sub).Update(ctx, o, opts...)
	}}, newBudget(1))
	clk := clocktesting.NewFakeClock(time.Now())
	other = newLedger(c, clk)
	l := newLedger(c, clk)
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "ours"}, take("ours", &calls))
	if err != nil {
		t.Fatal(err)
	}
	if out.Allowed || calls != 2 {
		t.Fatalf("%+v after %d decisions; want denied on the latest status, decided twice", out, calls)
	}
	if b := stored(t, c); b.Status.UnavailableAllowed != 0 || len(b.Status.Disruptions) != 1 {
		t.Fatalf("status %+v; want only the other replica's request counted", b.Status)
	}
}

func TestConflictsUntilTheDeadline(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var attempts atomic.Int32
	c := newClient(t, &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
		attempts.Add(1)
		clk.Step(3 * time.Second)
		return apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("podunavailablebudgets").GroupResource(), key.Name, errors.New("changed"))
	}}, newBudget(5))
	l := newLedger(c, clk)
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if !apierrors.IsConflict(err) || out.Written {
		t.Fatalf("%+v, %v; want the conflict once the deadline passed", out, err)
	}
	// 8 s at 3 s per attempt: the third write ends past the deadline.
	if attempts.Load() != 3 {
		t.Fatalf("%d writes; want 3 within the %s deadline", attempts.Load(), DefaultTimeout)
	}
}

func TestReplicaKilledBetweenWriteAndAnswer(t *testing.T) {
	c := newClient(t, nil, newBudget(1))
	clk := clocktesting.NewFakeClock(time.Now())
	killed := newLedger(c, clk)
	calls := 0
	if out, err := killed.Decide(context.Background(), Request{Object: key, ID: "req"}, take("req", &calls)); err != nil || !out.Written {
		t.Fatalf("%+v, %v; want written", out, err)
	}
	// Its answer never reached the API server, which asks another
	// replica: that one finds the request in the status and admits it
	// without counting it again, although nothing is left.
	next := newLedger(c, clk)
	out, err := next.Decide(context.Background(), Request{Object: key, ID: "req"}, take("req", &calls))
	if err != nil || !out.Allowed || out.Written {
		t.Fatalf("retry on another replica: %+v, %v; want allowed, nothing written", out, err)
	}
	if b := stored(t, c); b.Status.UnavailableAllowed != 0 || len(b.Status.Disruptions) != 1 {
		t.Fatalf("status %+v; want the request counted once", b.Status)
	}
}

func TestDryRunDecidesAndNeverWrites(t *testing.T) {
	c := newClient(t, nil, newBudget(1))
	l := newLedger(c, clocktesting.NewFakeClock(time.Now()))
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "a", DryRun: true}, take("a", &calls))
	if err != nil || !out.Allowed || out.Written {
		t.Fatalf("%+v, %v; want allowed, not written", out, err)
	}
	if b := stored(t, c); b.Status.UnavailableAllowed != 1 || len(b.Status.Disruptions) != 0 {
		t.Fatalf("status %+v; want untouched", b.Status)
	}
	// Not remembered either: the real request is decided and counted.
	out, err = l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || out.Repeated || !out.Written {
		t.Fatalf("%+v, %v; want the real request counted", out, err)
	}
}

func TestStaleCacheDeniesOnlyOnTheLatest(t *testing.T) {
	c := newClient(t, nil, newBudget(1))
	// The cache still holds a copy with nothing left; the status has been
	// given back since.
	cache := newClient(t, nil, newBudget(0))
	l := newLedger(c, clocktesting.NewFakeClock(time.Now()))
	l.Cache = cache
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || !out.Allowed || !out.Written || calls != 2 {
		t.Fatalf("%+v, %v after %d decisions; want admitted on the latest status after a denial on the cache", out, err, calls)
	}
}

func TestGoneObjectGuardsNothing(t *testing.T) {
	l := newLedger(newClient(t, nil), clocktesting.NewFakeClock(time.Now()))
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || !out.Allowed || !out.Gone || calls != 0 {
		t.Fatalf("%+v, %v; want allowed as gone, not decided", out, err)
	}
}

// A write cut off by the replica's shutdown (its context canceled before
// or while the status is stored) is an error, never an admission: the
// request was not counted. client-go's retry.OnError took a canceled
// context for an interrupted wait and returned the last retriable error,
// nil: the decision stood unwritten and a stopping replica admitted
// deletes it never counted (the flow control's 26 under a limit of 25).
func TestWriteCutOffByShutdownIsNotAdmitted(t *testing.T) {
	for _, cut := range []error{
		fmt.Errorf("client rate limiter Wait returned an error: %w", context.Canceled),
		&url.Error{Op: "Put", URL: "https://127.0.0.1/status", Err: context.Canceled},
		fmt.Errorf("request: %w", context.DeadlineExceeded),
	} {
		c := newClient(t, &interceptor.Funcs{SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return cut
		}}, newBudget(1))
		calls := 0
		out, err := newLedger(c, clocktesting.NewFakeClock(time.Now())).Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
		if err == nil || out.Written {
			t.Errorf("write failing with %v: %+v, %v; want an error", cut, out, err)
		}
		if b := stored(t, c); b.Status.UnavailableAllowed != 1 {
			t.Errorf("status %+v; want nothing counted", b.Status)
		}
	}
}

// An API server starting may answer 404 for a custom resource it does not
// serve yet ("the server could not find the requested resource", no object
// named): that is not the object gone, and the request is decided on the
// object once the server serves it.
func TestNotFoundWithoutTheObjectIsNotGone(t *testing.T) {
	var starting atomic.Int32
	c := newClient(t, &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
		if starting.Add(1) <= 2 {
			return apierrors.NewNotFound(schema.GroupResource{}, "")
		}
		return c.Get(ctx, k, o, opts...)
	}}, newBudget(0))
	l := newLedger(c, clocktesting.NewFakeClock(time.Now()))
	calls := 0
	out, err := l.Decide(context.Background(), Request{Object: key, ID: "a"}, take("a", &calls))
	if err != nil || out.Allowed || out.Gone || calls != 1 {
		t.Fatalf("%+v, %v after %d decisions; want denied by the object once it is served, not allowed as gone", out, err, calls)
	}
}

func TestAmendGivesBack(t *testing.T) {
	c := newClient(t, nil, newBudget(1))
	l := newLedger(c, clocktesting.NewFakeClock(time.Now()))
	calls := 0
	if _, err := l.Decide(context.Background(), Request{Object: key}, take("a", &calls)); err != nil {
		t.Fatal(err)
	}
	err := l.Amend(context.Background(), key, func(b *v1alpha1.PodUnavailableBudget) bool {
		delete(b.Status.Disruptions, "a")
		b.Status.UnavailableAllowed++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if b := stored(t, c); b.Status.UnavailableAllowed != 1 || len(b.Status.Disruptions) != 0 {
		t.Fatalf("status %+v; want given back", b.Status)
	}
}
