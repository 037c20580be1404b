// Package ledger keeps counts that admission decisions depend on in the
// status of a Kubernetes object (a PodUnavailableBudget's disruptions, a
// DeletionFlowControl's deletes): read the status, decide, write what was
// admitted into the status with optimistic concurrency, retry on a
// conflict, and only then answer. The resourceVersion check is what makes a
// count exact across replicas and durable across restarts; no lock
// service, no leader.
//
// The decision itself stays a pure function of the object and the clock,
// passed in by the caller; the ledger is the loop around it.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// DefaultTimeout bounds one decision's retries, inside the API server's
// 10 s webhook timeout.
const DefaultTimeout = 8 * time.Second

// RememberFor is how long an admitted request is not counted again.
const RememberFor = 2 * time.Minute

// maxRemembered bounds the memory of admitted requests per object; beyond
// it, entries older than RememberFor are dropped.
const maxRemembered = 10000

// backoff spaces retries after a conflict. The deadline, not the steps,
// ends a contended loop; jitter keeps replicas from colliding again.
var backoff = wait.Backoff{Duration: 2 * time.Millisecond, Factor: 1.2, Jitter: 1, Steps: 60}

// Decision is what a decide function says about one request: its
// verdict, which the ledger only reads for Allowed and hands back in the
// Outcome, and whether it changed the object. A refusal that writes
// nothing is made only on the latest status: a cached copy may lag
// releases.
type Decision struct {
	verdict.Verdict
	// Write says the decide function changed the object's status, which
	// must be stored before the request is answered.
	Write bool
}

// Outcome is how a decision ended.
type Outcome[T client.Object] struct {
	Decision
	// Object is the object the decision was made on, as written when
	// Written; nil when Gone or Repeated.
	Object T
	// Written is set when the status was stored.
	Written bool
	// Gone is set when the object does not exist (deleted since): it
	// guards nothing, and the request is allowed.
	Gone bool
	// Repeated is set when this replica admitted the same request lately
	// (the API server asks again when a concurrent write forces a retry):
	// it is allowed without counting it twice.
	Repeated bool
}

// Ledger decides requests against the status of objects of type T. The
// zero value is not usable: Client and New are required.
type Ledger[T client.Object] struct {
	// Client reads the latest objects and writes their status.
	Client client.Client
	// Cache, if set, is where a first read starts (an informer cache): an
	// admission then costs no read. A write from a stale copy conflicts
	// and is retried on the latest.
	Cache client.Reader
	// New returns an empty T to read into.
	New func() T
	// Clock is the time of deadlines and of the memory; nil is the real
	// clock.
	Clock clock.PassiveClock
	// Timeout bounds one decision's retries; zero is DefaultTimeout.
	Timeout time.Duration

	mu sync.Mutex
	// locks serialize this replica's decisions on each object, so that
	// conflicts come only from other replicas.
	locks map[client.ObjectKey]*sync.Mutex
	// written is each object as this replica last wrote it: if nobody
	// wrote since, the next write succeeds without a read first.
	written map[client.ObjectKey]T
	// admitted remembers, per object, requests admitted lately. A retry
	// sent to another replica is counted again: conservative, never over
	// the limit.
	admitted map[client.ObjectKey]map[string]time.Time
}

// Request names what is decided.
type Request struct {
	// Object is the ledger object (the budget, the flow control).
	Object client.ObjectKey
	// ID identifies the request across the API server's retries (for a
	// delete, the deleted object's UID); empty disables the memory.
	ID string
	// DryRun decides and never writes, nor remembers.
	DryRun bool
}

// Decide reads the object, calls decide on a copy it may change, and, when
// the decision says Write and the request is no dry run, stores the status
// with optimistic concurrency, retrying on a conflict until the deadline.
// decide may be called several times; only the last call's decision
// stands. An admitted, written request is remembered by its ID.
func (l *Ledger[T]) Decide(ctx context.Context, r Request, decide func(obj T) (Decision, error)) (Outcome[T], error) {
	var out Outcome[T]
	if r.ID != "" && !r.DryRun && l.seen(r.Object, r.ID) {
		out.Allowed, out.Repeated = true, true
		return out, nil
	}
	lock := l.lock(r.Object)
	lock.Lock()
	defer lock.Unlock()
	deadline := l.clock().Now().Add(l.timeout())
	latest := false
	retriable := func(err error) bool {
		return (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) && l.clock().Now().Before(deadline)
	}
	err := retryOn(backoff, retriable, func() error {
		out = Outcome[T]{}
		obj, stale, err := l.read(ctx, r.Object, latest)
		switch {
		case gone(err, r.Object):
			l.forget(r.Object)
			out.Allowed, out.Gone = true, true
			return nil
		case apierrors.IsNotFound(err):
			// Not the object: the API server does not serve its kind
			// yet (a server starting). Ask again, never wave through.
			latest = true
			return err
		case err != nil:
			return readError{err}
		}
		d, err := decide(obj)
		if err != nil {
			return decideError{err}
		}
		if !d.Allowed && !d.Write && stale {
			// Deny only on the latest.
			if obj, _, err = l.read(ctx, r.Object, true); gone(err, r.Object) {
				l.forget(r.Object)
				out.Allowed, out.Gone = true, true
				return nil
			} else if apierrors.IsNotFound(err) {
				latest = true
				return err
			} else if err != nil {
				return readError{err}
			}
			if d, err = decide(obj); err != nil {
				return decideError{err}
			}
		}
		out.Decision, out.Object = d, obj
		if !d.Write || r.DryRun {
			return nil
		}
		if err := l.Client.Status().Update(ctx, obj); err != nil {
			// Another replica (or a controller) wrote first: read again
			// and decide again.
			latest = true
			return err
		}
		l.set(r.Object, obj)
		out.Written = true
		if d.Allowed && r.ID != "" {
			l.remember(r.Object, r.ID)
		}
		return nil
	})
	switch e := err.(type) {
	case nil:
		return out, nil
	case decideError:
		return out, e.error
	case readError:
		return out, fmt.Errorf("reading the latest status: %w", e.error)
	default:
		return out, fmt.Errorf("writing the status: %w", err)
	}
}

// Amend changes an object's status from its latest version, retrying on a
// conflict: change says whether there is anything to write. It is for
// corrections outside a decision, e.g. giving back what a request took
// when another rule denied it.
func (l *Ledger[T]) Amend(ctx context.Context, key client.ObjectKey, change func(obj T) bool) error {
	lock := l.lock(key)
	lock.Lock()
	defer lock.Unlock()
	return retryOn(retry.DefaultRetry, apierrors.IsConflict, func() error {
		obj := l.New()
		if err := l.Client.Get(ctx, key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				l.forget(key)
				return nil
			}
			return err
		}
		if !change(obj) {
			return nil
		}
		if err := l.Client.Status().Update(ctx, obj); err != nil {
			return err
		}
		l.set(key, obj)
		return nil
	})
}

// gone says whether err is the API server's word that the object does
// not exist. A 404 that names no object ("the server could not find the
// requested resource") is not: an API server starting may answer it for
// a custom resource it does not serve yet, and taking that for "deleted"
// admitted requests uncounted.
func gone(err error, key client.ObjectKey) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Name == key.Name
}

// retryOn calls fn until it succeeds or fails with an error retriable
// does not take, sleeping between tries as b says, and returns fn's last
// error. Not client-go's retry.OnError: that one takes an error wrapping
// a canceled context (a write cut off as the replica shuts down) for an
// interrupted wait and returns the last retriable error instead — nil
// when there was none, a decision reported written that never was.
func retryOn(b wait.Backoff, retriable func(error) bool, fn func() error) error {
	for {
		err := fn()
		if err == nil || !retriable(err) || b.Steps <= 1 {
			return err
		}
		time.Sleep(b.Step())
	}
}

// readError and decideError end the loop: they are not the API errors it
// retries, even when they wrap one.
type readError struct{ error }

type decideError struct{ error }

// read is the object to decide on: unless latest is asked for, the copy
// this replica wrote last or the cache's (stale says so).
func (l *Ledger[T]) read(ctx context.Context, key client.ObjectKey, latest bool) (obj T, stale bool, err error) {
	if !latest {
		if o, ok := l.get(key); ok {
			return o, true, nil
		}
		if l.Cache != nil {
			o := l.New()
			if l.Cache.Get(ctx, key, o) == nil {
				return o, true, nil
			}
		}
	}
	obj = l.New()
	return obj, false, l.Client.Get(ctx, key, obj)
}

func (l *Ledger[T]) clock() clock.PassiveClock {
	if l.Clock == nil {
		return clock.RealClock{}
	}
	return l.Clock
}

func (l *Ledger[T]) timeout() time.Duration {
	if l.Timeout <= 0 {
		return DefaultTimeout
	}
	return l.Timeout
}

func (l *Ledger[T]) lock(key client.ObjectKey) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks == nil {
		l.locks = map[client.ObjectKey]*sync.Mutex{}
	}
	if l.locks[key] == nil {
		l.locks[key] = &sync.Mutex{}
	}
	return l.locks[key]
}

func (l *Ledger[T]) get(key client.ObjectKey) (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.written[key]
	if !ok {
		var zero T
		return zero, false
	}
	return o.DeepCopyObject().(T), true
}

func (l *Ledger[T]) set(key client.ObjectKey, o T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written == nil {
		l.written = map[client.ObjectKey]T{}
	}
	l.written[key] = o.DeepCopyObject().(T)
}

func (l *Ledger[T]) forget(key client.ObjectKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.written, key)
	delete(l.admitted, key)
}

func (l *Ledger[T]) seen(key client.ObjectKey, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.admitted[key][id]
	return ok && l.clock().Since(t) < RememberFor
}

func (l *Ledger[T]) remember(key client.ObjectKey, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.admitted == nil {
		l.admitted = map[client.ObjectKey]map[string]time.Time{}
	}
	m := l.admitted[key]
	if m == nil {
		m = map[string]time.Time{}
		l.admitted[key] = m
	}
	now := l.clock().Now()
	if len(m) > maxRemembered {
		for id, t := range m {
			if now.Sub(t) >= RememberFor {
				delete(m, id)
			}
		}
	}
	m[id] = now
}

// Lazy is a Ledger made on its first use. A handler holds one when its
// client is set after the handler is made (by its protection's plugin, by
// a test), so that it needs no constructor.
type Lazy[T client.Object] struct {
	once sync.Once
	l    *Ledger[T]
}

// Of is the ledger, made on the first call from c, cache (may be nil),
// clk and newT (see Ledger's fields); later calls return the same one.
func (z *Lazy[T]) Of(c client.Client, cache client.Reader, clk clock.PassiveClock, newT func() T) *Ledger[T] {
	z.once.Do(func() { z.l = &Ledger[T]{Client: c, Cache: cache, Clock: clk, New: newT} })
	return z.l
}

// Recent is list with e in front, at most max long: the newest records a
// status keeps (a flow control's or a node budget's recent denials).
func Recent[E any](list []E, e E, max int) []E {
	list = append([]E{e}, list...)
	if len(list) > max {
		list = list[:max]
	}
	return list
}
