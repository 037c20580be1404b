package recyclebin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Keeper keeps a copy of each object before its delete is admitted, and
// settles afterwards what became of it: a webhook that admits a delete
// does not know whether the API server then deletes the object (another
// webhook may refuse it, a precondition may fail), so a capture stays
// Captured until the object is seen gone (Deleted) or alive past every
// admission's deadline (NotDeleted, never offered as deleted).
type Keeper struct {
	Bin *Bin
	// Alive reads the object as it is now.
	Alive Liveness
	Clock clock.WithTicker
	Log   *slog.Logger
	// NotDeletedAfter is how long after its capture an object still
	// alive counts as not deleted; 0 is DefaultNotDeletedAfter.
	NotDeletedAfter time.Duration

	once  sync.Once
	queue workqueue.TypedDelayingInterface[pending]

	// One delete may reach several webhooks (a protected object a
	// RecyclePolicy selects too) and the API server may ask again (a
	// retry): one copy per object version is enough.
	flight singleflight.Group
	mu     sync.Mutex
	recent map[string]captured
	// uids are the objects of recent, for Captured.
	uids map[types.UID]time.Time
}

// captured is a copy stored lately, by object version.
type captured struct {
	name string
	at   time.Time
}

// recentFor is how long a capture answers for the same object version.
const recentFor = 2 * time.Minute

// q is the queue of captures to settle, made on first use: a webhook may
// capture before Start.
func (k *Keeper) q() workqueue.TypedDelayingInterface[pending] {
	k.once.Do(func() {
		k.queue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[pending]{Clock: k.Clock, Name: "recyclebin-settle"})
	})
	return k.queue
}

// Liveness says whether the object with uid is still there: found with
// that UID, and whether it is being deleted (a deletionTimestamp, waiting
// for finalizers).
type Liveness func(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, uid types.UID) (found, deleting bool, err error)

// MetadataLiveness reads liveness with a metadata-only LIST of the one
// name: the manager may list the resources it watches but, least
// privilege, get none of them (and neither reads nor lists Secrets: a
// Secret is known gone only once its namespace is).
func MetadataLiveness(c metadata.Interface) Liveness {
	return func(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, uid types.UID) (bool, bool, error) {
		var r metadata.ResourceInterface = c.Resource(gvr)
		if namespace != "" {
			r = c.Resource(gvr).Namespace(namespace)
		}
		list, err := r.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if apierrors.IsForbidden(err) && namespace != "" {
			// A resource the manager may not list (Secrets): gone for
			// sure when its namespace is.
			nss, nsErr := c.Resource(namespacesGVR).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", namespace).String()})
			if nsErr == nil && len(nss.Items) == 0 {
				return false, false, nil
			}
			if nsErr == nil && nss.Items[0].DeletionTimestamp != nil {
				// Going with its namespace (the namespace controller's
				// delete): looked at again until the namespace is gone.
				return true, true, nil
			}
		}
		if err != nil {
			return false, false, err
		}
		for _, m := range list.Items {
			// Another UID is the same name made again: the one
			// captured is gone.
			if m.UID == uid {
				return true, m.DeletionTimestamp != nil, nil
			}
		}
		return false, false, nil
	}
}

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// pending is a capture to settle, by its name in the store.
type pending struct {
	name    string
	capture time.Time
}

// DefaultNotDeletedAfter gives the verdict "not deleted" only once no
// admission of the captured request can still be under way: the API
// server gives a request at most a minute.
const DefaultNotDeletedAfter = 70 * time.Second

// Settling delays: the first look soon after the capture (most deletes are
// done within a second), and a look now and then until the verdict, and
// at an object waiting for its finalizers.
const (
	firstLook     = time.Second
	lookAgain     = 5 * time.Second
	finalizerWait = 10 * time.Minute
)

// ErrStore wraps a failure to store a copy: the delete must not go
// through.
var ErrStore = errors.New("the recycle bin could not keep a copy")

// Capture stores e (State Captured, How API) durably and queues it to be
// settled. It returns once the copy is on the store.
func (k *Keeper) Capture(ctx context.Context, e Entry) (string, error) {
	key := string(e.UID) + "/" + resourceVersion(e.Object)
	now := k.Clock.Now()
	k.mu.Lock()
	if c, ok := k.recent[key]; ok && now.Sub(c.at) < recentFor {
		k.mu.Unlock()
		return c.name, nil
	}
	k.mu.Unlock()
	name, err, _ := k.flight.Do(key, func() (any, error) {
		name, err := k.capture(ctx, e)
		if err == nil {
			k.remember(key, e.UID, name, now)
		}
		return name, err
	})
	return name.(string), err
}

// remember records a capture, forgetting the old ones.
func (k *Keeper) remember(key string, uid types.UID, name string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.recent == nil {
		k.recent, k.uids = map[string]captured{}, map[types.UID]time.Time{}
	}
	for key, c := range k.recent {
		if now.Sub(c.at) >= recentFor {
			delete(k.recent, key)
		}
	}
	for uid, at := range k.uids {
		if now.Sub(at) >= recentFor {
			delete(k.uids, uid)
		}
	}
	k.recent[key] = captured{name: name, at: now}
	k.uids[uid] = now
}

// Captured says whether this keeper stored a copy of the object with uid
// in the last two minutes: the outside-API watch asks it first, so that
// the delete of a kept object, which it sees moments after the capture,
// costs it no lookup in the store (a Dir lists the object's whole folder).
// A capture by another replica is found in the store.
func (k *Keeper) Captured(uid types.UID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.uids[uid]
	return ok && k.Clock.Since(at) < recentFor
}

// resourceVersion is an object's metadata.resourceVersion ("" if none).
func resourceVersion(object []byte) string {
	var m struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(object, &m)
	return m.Metadata.ResourceVersion
}

func (k *Keeper) capture(ctx context.Context, e Entry) (string, error) {
	e.State, e.How = StateCaptured, HowAPI
	if e.DeletedAt.IsZero() {
		e.DeletedAt = k.Clock.Now()
	}
	resource := e.Resource.GroupResource().String()
	start := time.Now()
	name, err := k.Bin.Put(ctx, e)
	captureSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		captureFailures.WithLabelValues(resource).Inc()
		k.Log.Warn("recycle bin: storing a copy before a delete failed; the delete is refused, unless it empties a protected namespace (those copies fail open)", "object", e.Described(), "err", err)
		return "", fmt.Errorf("%w: %w", ErrStore, err)
	}
	captures.WithLabelValues(resource).Inc()
	k.q().AddAfter(pending{name: name, capture: e.DeletedAt}, firstLook)
	return name, nil
}

// Start settles captures until ctx ends, beginning with those a previous
// run left Captured within the last since.
func (k *Keeper) Start(ctx context.Context, since time.Duration) {
	queue := k.q()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	go k.resume(ctx, since)
	go func() {
		for {
			p, shutdown := queue.Get()
			if shutdown {
				return
			}
			k.settle(ctx, p)
			queue.Done(p)
		}
	}()
}

// resume queues the entries still Captured (a replica stopped before it
// settled them).
func (k *Keeper) resume(ctx context.Context, since time.Duration) {
	listed, err := k.Bin.List(ctx, "")
	if err != nil {
		k.Log.Warn("recycle bin: listing captures to settle", "err", err)
		return
	}
	horizon := k.Clock.Now().Add(-since)
	for _, l := range listed {
		if l.DeletedAt.Before(horizon) {
			continue
		}
		e, err := k.Bin.Get(ctx, l.StoreName)
		if err != nil || e.State != StateCaptured {
			continue
		}
		k.q().Add(pending{name: l.StoreName, capture: e.DeletedAt})
	}
}

func (k *Keeper) settle(ctx context.Context, p pending) {
	e, err := k.Bin.Get(ctx, p.name)
	if err != nil {
		k.Log.Warn("recycle bin: reading a capture to settle", "entry", p.name, "err", err)
		k.retry(p)
		return
	}
	if e.State != StateCaptured {
		return
	}
	found, deleting, err := k.Alive(ctx, e.Resource, e.Namespace, e.Name, e.UID)
	if apierrors.IsForbidden(err) {
		// Rampart may not read this resource (Secrets): the copy stays
		// Captured; a restore never overwrites the object if it lives.
		k.Log.Info("recycle bin: cannot tell whether a captured delete happened, the manager may not list the resource; the copy stays Captured",
			"object", e.Described())
		return
	}
	if err != nil {
		k.Log.Warn("recycle bin: looking up a captured object", "object", e.Described(), "err", err)
		k.retry(p)
		return
	}
	age := k.Clock.Since(p.capture)
	notDeletedAt := k.NotDeletedAfter
	if notDeletedAt <= 0 {
		notDeletedAt = DefaultNotDeletedAfter
	}
	switch {
	case !found:
		e.State = StateDeleted
	case deleting:
		if age < finalizerWait {
			k.q().AddAfter(p, lookAgain)
			return
		}
		// Still waiting for its finalizers: left Captured, and offered
		// for restore only once it is gone (restore never overwrites a
		// live object).
		return
	case age < notDeletedAt:
		k.q().AddAfter(p, min(lookAgain, notDeletedAt-age))
		return
	default:
		e.State = StateNotDeleted
	}
	if err := k.Bin.Settle(ctx, p.name, e.State); err != nil {
		k.Log.Warn("recycle bin: recording what became of a capture", "object", e.Described(), "state", e.State, "err", err)
		k.retry(p)
		return
	}
	settled.WithLabelValues(e.State).Inc()
}

func (k *Keeper) retry(p pending) {
	if k.Clock.Since(p.capture) < finalizerWait {
		k.q().AddAfter(p, lookAgain)
	}
}
