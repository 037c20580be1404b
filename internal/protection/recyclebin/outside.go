package recyclebin

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

var deletedOutside = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_recyclebin_deleted_outside_api_total",
	Help: "Protected objects that vanished without a delete admitted through the API (removed from etcd directly, or an older snapshot restored), kept from the last state seen, by resource.",
}, []string{"resource"})

var watched = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "rampart_recyclebin_watched_objects",
	Help: "Kept objects whose last state the leader holds, to keep one that vanishes outside the API, by resource and the label selector it lists them with (rampart.io/protection, or a policy's object selector; empty: every object).",
}, []string{"resource", "selector"})

// ReasonDeletedOutsideAPI is the Event reason of such a loss.
const ReasonDeletedOutsideAPI = "DeletedOutsideAPI"

// Watcher catches deletes that never pass admission: it holds the last
// state of every kept object (full objects: a label-selected informer per
// resource for rampart.io/protection, and one per resource and object
// selector of each policy's scope), and when one vanishes with no copy
// captured for it through the API, stores that last state as
// DeletedOutsideAPI, with a Warning Event, a metric and a log line. One
// replica runs it (the leader). Informers of a policy since removed keep
// running until the manager restarts; what they see vanish is no longer
// kept.
type Watcher struct {
	Bin *Bin
	// Objects are the full objects it watches, from the manager's
	// informers (clusterview.LastStates). Whoever runs them calls Poke
	// when a CRD changes.
	Objects Objects
	// Alive tells a vanished object from one that only left the label
	// selector (its label removed, the escape hatch).
	Alive    Liveness
	Recorder events.EventRecorder
	Clock    clock.Clock
	Log      *slog.Logger
	// Rescan is how often discovery is read again for new resources.
	Rescan time.Duration
	// Scopes are what policies keep beyond the labelled objects: each
	// enforced ProtectionPolicy that protects, and each RecyclePolicy.
	// Nil watches the labelled objects only.
	Scopes func() []Scope
	// NamespaceLabels are a namespace's labels, if it is known.
	NamespaceLabels func(string) (map[string]string, bool)
	// Captured, if set, says whether this replica captured a copy of the
	// object with the UID lately (Keeper.Captured): asked before the
	// API server and the store.
	Captured func(types.UID) bool

	mu sync.Mutex
	// handled are the UIDs of vanished objects seen to (a UID is never
	// reused).
	handled map[types.UID]bool
	once    sync.Once
	poked   chan struct{}
}

// Scope is a policy's reach: its resources and selectors.
type Scope struct {
	Resources                         []v1alpha1.ResourceRule
	NamespaceSelector, ObjectSelector *metav1.LabelSelector
}

// covers says whether the scope reaches an object of gr with these
// labels, in a namespace with nsLabels (nil: cluster-scoped, or a
// namespace no longer known, which is given the benefit of the doubt).
func (s Scope) covers(gr schema.GroupResource, nsLabels, objLabels map[string]string) bool {
	return policy.InScope(s.Resources, s.NamespaceSelector, s.ObjectSelector, gr, nsLabels, objLabels)
}

// Objects run the informers of full objects the watch reads.
type Objects interface {
	// Resources are the resources served that can be listed and watched.
	Resources() ([]schema.GroupVersionResource, error)
	// Watch runs, until ctx ends, an informer of the full objects of gvr
	// that selector selects, with the handler made from its store, unless
	// one runs already or the manager may not watch gvr.
	Watch(ctx context.Context, gvr schema.GroupVersionResource, selector string, handler func(cache.Store) cache.ResourceEventHandler) (bool, error)
}

// Poke has the watch read its scopes again (a policy changed).
func (w *Watcher) Poke() {
	select {
	case w.pokes() <- struct{}{}:
	default:
	}
}

func (w *Watcher) pokes() chan struct{} {
	w.once.Do(func() { w.poked = make(chan struct{}, 1) })
	return w.poked
}

// never are resources whose objects are not kept: Secrets are not
// listable by the manager, Events and Leases are not key objects (and a
// policy over "*" would otherwise hold every lease's renewals).
var never = []schema.GroupResource{{Resource: "secrets"}, {Resource: "events"}, {Group: "events.k8s.io", Resource: "events"},
	{Group: "coordination.k8s.io", Resource: "leases"}}

// Start watches until ctx ends. Discovery is read again when a CRD
// changes (a new custom resource is watched once served), when a policy
// changes (Poke), and every Rescan.
func (w *Watcher) Start(ctx context.Context) error {
	every := w.Rescan
	if every <= 0 {
		every = time.Minute
	}
	for {
		w.scan(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-w.pokes():
		case <-time.After(every):
		}
	}
}

// scan starts an informer for each listable resource and selector not
// watched yet: the labelled objects of every resource, and what each
// policy's scope selects of the resources it names.
func (w *Watcher) scan(ctx context.Context) {
	resources, err := w.Objects.Resources()
	if err != nil {
		w.Log.Warn("recycle bin: discovery for the outside-API watch", "err", err)
		return
	}
	var scopes []Scope
	if w.Scopes != nil {
		scopes = w.Scopes()
	}
	for _, gvr := range resources {
		if slices.Contains(never, gvr.GroupResource()) {
			continue
		}
		selectors := []string{v1alpha1.LabelProtection}
		for _, sc := range scopes {
			if (Scope{Resources: sc.Resources}).covers(gvr.GroupResource(), nil, nil) {
				sel, err := metav1.LabelSelectorAsSelector(sc.ObjectSelector)
				if err != nil {
					continue
				}
				selectors = append(selectors, sel.String())
			}
		}
		for _, sel := range selectors {
			if _, err := w.Objects.Watch(ctx, gvr, sel, w.handler(ctx, gvr, sel)); err != nil {
				w.Log.Warn("recycle bin: watching for the outside-API watch", "resource", gvr.String(), "selector", sel, "err", err)
			}
		}
	}
}

// handler counts the objects an informer of gvr and selector holds, and
// keeps those that vanish.
func (w *Watcher) handler(ctx context.Context, gvr schema.GroupVersionResource, selector string) func(cache.Store) cache.ResourceEventHandler {
	return func(store cache.Store) cache.ResourceEventHandler {
		count := func() {
			watched.WithLabelValues(gvr.GroupResource().String(), selector).Set(float64(len(store.ListKeys())))
		}
		return cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { count() },
			DeleteFunc: func(obj any) {
				count()
				if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); ok && w.kept(gvr, u) {
					go w.keepVanished(ctx, gvr, u)
				}
			},
		}
	}
}

// kept says whether u is still something the bin keeps: labelled, or in
// the scope of a policy now (one removed since its informer started is
// not).
func (w *Watcher) kept(gvr schema.GroupVersionResource, u *unstructured.Unstructured) bool {
	if u.GetLabels()[v1alpha1.LabelProtection] != "" {
		return true
	}
	if w.Scopes == nil {
		return false
	}
	var nsLabels map[string]string
	if ns := u.GetNamespace(); ns != "" && w.NamespaceLabels != nil {
		if l, ok := w.NamespaceLabels(ns); ok {
			nsLabels = l
		}
	}
	return slices.ContainsFunc(w.Scopes(), func(s Scope) bool { return s.covers(gvr.GroupResource(), nsLabels, u.GetLabels()) })
}

// vanished handles an object the watch no longer sees.
// keepVanished keeps a vanished object's last state, trying again (about a
// minute in all) when the API server or the store fails on the way: the
// last state is only in memory.
func (w *Watcher) keepVanished(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	// Two informers may hold one object (its label and a policy's
	// selector): one record.
	w.mu.Lock()
	if w.handled == nil {
		w.handled = map[types.UID]bool{}
	}
	if w.handled[u.GetUID()] {
		w.mu.Unlock()
		return
	}
	w.handled[u.GetUID()] = true
	w.mu.Unlock()
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 8}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = w.vanished(ctx, gvr, u)
		return last == nil, nil
	})
	if err != nil {
		w.Log.Error("recycle bin: a protected object vanished and its last state could not be kept", "object", gvr.GroupResource().String()+"/"+u.GetName(),
			"namespace", u.GetNamespace(), "uid", u.GetUID(), "err", last)
	}
}

// vanished keeps u's last state if it is gone and no copy was captured
// through the API.
func (w *Watcher) vanished(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	e := Entry{Resource: gvr, Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID()}
	if w.Captured != nil && w.Captured(e.UID) {
		return nil // deleted through the API, and kept
	}
	found, _, err := w.Alive(ctx, gvr, e.Namespace, e.Name, e.UID)
	if err != nil {
		return fmt.Errorf("checking whether it is gone: %w", err)
	}
	if found {
		return nil // unlabelled, not deleted
	}
	kept, err := w.captured(ctx, e)
	if err != nil {
		return fmt.Errorf("looking for its capture: %w", err)
	}
	if kept {
		return nil
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil // an object the informer decoded always encodes
	}
	e.Object, e.How, e.State, e.DeletedAt = raw, HowOutsideAPI, StateDeleted, w.Clock.Now()
	name, err := w.Bin.Put(ctx, e)
	if err != nil {
		return fmt.Errorf("storing its last state: %w", err)
	}
	deletedOutside.WithLabelValues(gvr.GroupResource().String()).Inc()
	w.Log.Warn("a protected object vanished without a delete through the API (removed from etcd directly, or an older snapshot restored): its last state is kept",
		"object", e.Described(), "uid", e.UID, "entry", name)
	if w.Recorder != nil {
		ref := &corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: e.Namespace, Name: e.Name, UID: e.UID}
		w.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, ReasonDeletedOutsideAPI, "Lost",
			"%s vanished without a delete through the API (removed from etcd directly, or an older snapshot restored); its last state is in the recycle bin: kubectl rampart trash restore %s/%s%s --uid %s",
			e.Described(), gvr.Resource, e.Name, inNamespace(e.Namespace), e.UID)
	}
	return nil
}

// captured says whether a copy of e's object was stored through the API.
func (w *Watcher) captured(ctx context.Context, e Entry) (bool, error) {
	listed, err := w.Bin.Versions(ctx, e.Namespace, e.Resource.GroupResource(), e.Name)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(listed, func(l Listed) bool { return l.UID == e.UID }), nil
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " -n " + ns
}
