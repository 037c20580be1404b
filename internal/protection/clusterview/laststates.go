package clusterview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// LastStates is the view of full objects the recycle bin's outside-API
// watch reads (recyclebin.Watcher, on the leader only): the last state of
// each object it keeps, to store when one vanishes. The other views'
// informers cannot serve it: the labelled objects' are metadata-only (on
// every replica, where a full copy would serve nothing), the built-in
// resources' and the scaled custom resources' are slimmed. So it starts
// informers of full objects on demand, from the views' dynamic client and
// discovery, run by the caller's context (the leader's); the views' CRD
// informer tells the watch when to look again (Informers.OnCRDChange). A
// replica that never leads holds none of them. On the leader, the
// informer of a resource's labelled objects then serves the views too, in
// place of their metadata-only one (adopt): no object is held twice.
type LastStates struct {
	informers *Informers

	mu sync.Mutex
	// running are the informers started, by resource and selector; a nil
	// one is a resource the manager may not watch (asked once).
	running map[selection]cache.SharedIndexInformer
}

// selection is one informer: a resource and the label selector it lists.
type selection struct {
	gvr      schema.GroupVersionResource
	selector string
}

func newLastStates(c *Informers) *LastStates {
	return &LastStates{informers: c, running: map[selection]cache.SharedIndexInformer{}}
}

// Resources are the preferred versions of every resource the API server
// serves that can be listed and watched, namespaced or not; an error only
// when discovery answered nothing.
func (l *LastStates) Resources() ([]schema.GroupVersionResource, error) {
	lists, err := l.informers.discovery.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var out []schema.GroupVersionResource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				out = append(out, gv.WithResource(r.Name))
			}
		}
	}
	return out, nil
}

// Watch runs, until ctx ends, an informer of the full objects of gvr that
// selector selects ("" for all), with the handler made from its store. It
// runs one per resource and selector: false if one runs already, or if the
// manager may not list and watch gvr (asked once). The informer of a
// custom resource outlives its CRD: it sees the custom resources vanish
// as the CRD goes, and lists them again if it comes back.
func (l *LastStates) Watch(ctx context.Context, gvr schema.GroupVersionResource, selector string, handler func(cache.Store) cache.ResourceEventHandler) (bool, error) {
	k := selection{gvr, selector}
	l.mu.Lock()
	_, seen := l.running[k]
	l.mu.Unlock()
	if seen {
		return false, nil
	}
	c := l.informers
	if unwatched[gvr.GroupResource()] || c.mayWatch != nil && !c.mayWatch(ctx, gvr) {
		l.mu.Lock()
		l.running[k] = nil
		l.mu.Unlock()
		return false, nil
	}
	if c.dynamic == nil {
		return false, errors.New("cluster view: no dynamic client")
	}
	// The indexes of the views' labelled informers: this one may stand in
	// for one of them (adopt).
	inf := dynamicinformer.NewFilteredDynamicInformer(c.dynamic, gvr, metav1.NamespaceAll, 0,
		cache.Indexers{byNamespace: cache.MetaNamespaceIndexFunc, byOwner: ownerUIDs},
		func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
	if _, err := inf.AddEventHandler(handler(inf.GetStore())); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.running[k]; ok {
		return false, nil
	}
	l.running[k] = inf
	if selector == v1alpha1.LabelProtection {
		// The views may adopt it: it then runs as long as they do, not
		// only as long as the caller leads, so that a leader draining its
		// webhook calls at shutdown still judges from a live cache.
		run := ctx
		if views := c.runContext(); views != nil {
			run = views
		}
		go inf.RunWithContext(run)
		go l.adopt(ctx, gvr, inf)
		return true, nil
	}
	go inf.RunWithContext(ctx)
	return true, nil
}

// adopt has the views read the labelled objects of gvr from inf, a full
// copy of what their metadata informer holds, once it has synced, and
// stops that one: the leader then holds each labelled object once. It
// waits for the views to have started their labelled informers; one
// started later (its CRD came back) runs beside inf, as before.
func (l *LastStates) adopt(ctx context.Context, gvr schema.GroupVersionResource, inf cache.SharedIndexInformer) {
	c := l.informers
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, c.labelsWatched.Load) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.labelled[gvr]
	if !ok {
		return
	}
	cur.cancel()
	// Its CRD deleted, the views forget it; it runs on for the watch,
	// until ctx ends.
	c.labelled[gvr] = &crInformer{informer: inf, cancel: func() {}}
}
