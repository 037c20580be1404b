package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/protection/traffic"
)

const (
	// countScrapeInterval is how often the API server's object counts
	// are read. The API server itself refreshes them every
	// --etcd-count-metric-poll-period (1 minute by default), so they
	// are at worst that old; the watches below are current.
	countScrapeInterval = 5 * time.Second
	// maxCountedResources bounds the resources the gateway watches to
	// count per namespace: only resources LISTed under a list guard are
	// watched, and a handful of kinds (pods, configmaps, secrets, events)
	// are the ones that matter. At the cap, a resource is priced by the
	// API server's cluster-wide count alone (see For).
	maxCountedResources = 64
	// defaultCountIdleAfter is how long a resource counted since a
	// guarded request is counted with none: then its watch is stopped,
	// so that the cap counts the resources in use, not every resource
	// ever listed.
	defaultCountIdleAfter = 10 * time.Minute
)

// objectCounts knows how many objects each resource has, cluster-wide and
// per namespace, cheaply:
//
//   - cluster-wide from the API server's own count (apiserver_resource_objects,
//     or apiserver_storage_objects before it), scraped from /metrics of a
//     ready API server through the gateway's own transport;
//   - per namespace from metadata-only informers, started the first time a
//     guarded LIST of the resource is seen and holding only each object's
//     namespace and name, counted as events arrive.
//
// A namespaced LIST must be priced by its namespace, not by the cluster:
// charging it the cluster's count would refuse a small namespace's LIST
// because the cluster is big.
type objectCounts struct {
	log  *slog.Logger
	rest rest.Interface
	md   metadata.Interface
	// discovery resolves the versions of resources counted eagerly.
	discovery discovery.DiscoveryInterface

	// idleAfter: see defaultCountIdleAfter.
	idleAfter time.Duration
	// uncounted counts guarded requests of resources not counted per
	// namespace: because maxCountedResources are, or because the gateway
	// may not (see uncountedBecause).
	uncounted prometheus.Counter
	// customGroups are the custom-resource groups the gateway may count
	// (--count-custom-resource-groups).
	customGroups map[string]bool
	// mayCount asks the API server whether the gateway may list and watch
	// a resource in every namespace (a SelfSubjectAccessReview); nil
	// allows all. An informer it may not run would retry forever and
	// never sync.
	mayCount func(context.Context, schema.GroupVersionResource) (bool, error)

	mu sync.Mutex
	// ctx is the gateway's background context, set by run: informers
	// started later live as long as it, or until idle.
	ctx       context.Context
	cluster   map[schema.GroupResource]int64 // from the API server's metric
	resources map[schema.GroupResource]*namespaceCounts
	// atCapLogged says the cap has been logged since it was last reached.
	atCapLogged bool
	// uncountable are resources the gateway does not count (logged once),
	// until the time given; zero: for good.
	uncountable map[schema.GroupResource]time.Time
}

// namespaceCounts counts one resource's objects per namespace.
type namespaceCounts struct {
	mu    sync.Mutex
	perNS map[string]int64
	total int64
	// synced is nil until the informer starts (after the access review).
	synced cache.InformerSynced

	// Under objectCounts.mu: eager counts (--count-resources) are never
	// stopped; others are stopped by stop once lastUsed is idleAfter old.
	eager    bool
	lastUsed time.Time
	stop     context.CancelFunc
}

func newObjectCounts(cfg *rest.Config, restClient rest.Interface, log *slog.Logger) (*objectCounts, error) {
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &objectCounts{
		log: log, rest: restClient, md: md, discovery: disc, idleAfter: defaultCountIdleAfter,
		uncounted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rampart_gateway_uncounted_lists_total",
			Help: fmt.Sprintf("Guarded LISTs and watch-lists of resources the gateway does not count per namespace, because it already counts %d (the cap) "+
				"or may not list them (Secrets; custom resources outside --count-custom-resource-groups): "+
				"priced by the API server's cluster-wide count, and a namespaced one never refused as unpaginated. Resources unused for a while stop being counted.", maxCountedResources),
		}),
		cluster: map[schema.GroupResource]int64{}, resources: map[schema.GroupResource]*namespaceCounts{},
		uncountable: map[schema.GroupResource]time.Time{},
	}, nil
}

// For is what the gateway knows of r's resource's objects at now. A first
// guarded request of a resource starts counting it per namespace; each one
// keeps it counted (see stopIdle).
func (c *objectCounts) For(r traffic.Request, now time.Time) traffic.ObjectCounts {
	gr := schema.GroupResource{Group: r.APIGroup, Resource: r.Resource}
	c.mu.Lock()
	cluster, known := c.cluster[gr]
	nc := c.resources[gr]
	// Only resources the API server counts are watched: a LIST of a
	// resource that does not exist starts nothing.
	if nc == nil && known && c.ctx != nil && r.Version != "" {
		gvr := schema.GroupVersionResource{Group: r.APIGroup, Version: r.Version, Resource: r.Resource}
		if c.isUncountable(gvr, now) {
			c.uncounted.Inc()
		} else if len(c.resources) < maxCountedResources {
			nc = c.startChecked(gvr, now)
			c.resources[gr] = nc
		} else {
			c.uncounted.Inc()
			if !c.atCapLogged {
				c.atCapLogged = true
				c.log.Warn("the LIST guard counts objects per namespace for at most this many resources and counts that many: "+
					"this resource is priced by its cluster-wide count, and its namespaced unpaginated LISTs are not refused, until a counted resource goes unused",
					"max", maxCountedResources, "resource", gr.String(), "idleAfter", c.idleAfter.String())
			}
		}
	}
	if nc != nil {
		nc.lastUsed = now
	}
	c.mu.Unlock()
	out := traffic.ObjectCounts{Cluster: cluster, ClusterKnown: known}
	if nc != nil && nc.isSynced() {
		nc.mu.Lock()
		out.Cluster, out.ClusterKnown = nc.total, true // fresher than the metric
		if r.Namespace != "" {
			out.Namespace, out.NamespaceKnown = nc.perNS[r.Namespace], true
		}
		nc.mu.Unlock()
	}
	return out
}

// uncountedBecause says why the gateway never counts gr per namespace,
// whatever its rights, or "" if it may try: Secrets, so that it needs no
// right to read them, and custom resources outside groups (see
// CountedGroups).
func uncountedBecause(gr schema.GroupResource, groups map[string]bool) string {
	switch {
	case gr.Group == "" && gr.Resource == "secrets":
		return "the gateway never reads Secrets"
	case gr.Group == "" || slices.Contains(CountedGroups, gr.Group) || groups[gr.Group]:
		return ""
	default:
		return "a custom-resource group not in --count-custom-resource-groups (the chart's gateway.countCustomResourceGroups)"
	}
}

// selfAccessReview asks the API server whether the gateway may list and
// watch a resource in every namespace.
func selfAccessReview(reviews authorizationv1client.SelfSubjectAccessReviewInterface) func(context.Context, schema.GroupVersionResource) (bool, error) {
	return func(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
		for _, verb := range []string{"list", "watch"} {
			r, err := reviews.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !r.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
}

// isUncountable says whether gvr is not to be counted at now, and logs
// the first time it is found so. Called with c.mu held.
func (c *objectCounts) isUncountable(gvr schema.GroupVersionResource, now time.Time) bool {
	gr := gvr.GroupResource()
	if until, ok := c.uncountable[gr]; ok && (until.IsZero() || now.Before(until)) {
		return true
	}
	if why := uncountedBecause(gr, c.customGroups); why != "" {
		c.markUncountable(gvr, why, time.Time{})
		return true
	}
	return false
}

// markUncountable stops gvr from being counted until until (zero: for
// good) and logs it once. Called with c.mu held.
func (c *objectCounts) markUncountable(gvr schema.GroupVersionResource, why string, until time.Time) {
	gr := gvr.GroupResource()
	_, logged := c.uncountable[gr]
	c.uncountable[gr] = until
	if !logged {
		c.log.Info("the LIST guard does not count this resource per namespace: it is priced by its cluster-wide count, and its namespaced unpaginated LISTs are not refused",
			"resource", gr.String(), "because", why)
	}
}

// startChecked counts gvr per namespace once the API server says the
// gateway may list and watch it (mayCount); until then, and if it may
// not, gvr is priced as uncounted. Called with c.mu held.
func (c *objectCounts) startChecked(gvr schema.GroupVersionResource, now time.Time) *namespaceCounts {
	ctx, stop := context.WithCancel(c.ctx)
	nc := &namespaceCounts{perNS: map[string]int64{}, stop: stop, lastUsed: now}
	if c.mayCount == nil {
		c.start(ctx, gvr, nc)
		return nc
	}
	go func() {
		allowed, err := c.mayCount(ctx, gvr)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.resources[gvr.GroupResource()] != nc { // stopped meanwhile
			return
		}
		switch {
		case err != nil:
			// Asked again in a minute, not at each request of a storm.
			delete(c.resources, gvr.GroupResource())
			stop()
			c.log.Warn("asking the API server whether the gateway may count a resource for the LIST guard", "resource", gvr.GroupResource().String(), "err", err.Error())
			c.markUncountable(gvr, "the access review failed", time.Now().Add(time.Minute))
		case !allowed:
			delete(c.resources, gvr.GroupResource())
			stop()
			c.markUncountable(gvr, "the gateway may not list and watch it (ClusterRole rampart-gateway; custom resources: gateway.countCustomResourceGroups)", time.Time{})
		default:
			c.start(ctx, gvr, nc)
		}
	}()
	return nc
}

// start watches gvr's metadata into nc, counting its objects per
// namespace, until ctx ends. Called with c.mu held.
func (c *objectCounts) start(ctx context.Context, gvr schema.GroupVersionResource, nc *namespaceCounts) {
	informer := metadatainformer.NewFilteredMetadataInformer(c.md, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	// Only the namespace and name are kept: the cache of a resource with
	// many objects stays small.
	_ = informer.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name}}, nil
		}
		return obj, nil
	})
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { nc.add(obj, 1) },
		DeleteFunc: func(obj any) { nc.add(obj, -1) },
	})
	if err != nil { // only when the informer has stopped: it has not started
		return
	}
	nc.mu.Lock()
	nc.synced = reg.HasSynced
	nc.mu.Unlock()
	c.log.Info("counting objects per namespace for the LIST guard", "resource", gvr.String())
	go informer.Run(ctx.Done())
}

func (nc *namespaceCounts) isSynced() bool {
	nc.mu.Lock()
	synced := nc.synced
	nc.mu.Unlock()
	return synced != nil && synced()
}

// idleCounts are the resources whose counts may stop at now: counted
// since a guarded request (not eagerly) and consulted by none for
// idleAfter.
func idleCounts(resources map[schema.GroupResource]*namespaceCounts, now time.Time, idleAfter time.Duration) []schema.GroupResource {
	var idle []schema.GroupResource
	for gr, nc := range resources {
		if !nc.eager && now.Sub(nc.lastUsed) >= idleAfter {
			idle = append(idle, gr)
		}
	}
	return idle
}

// stopIdle stops counting the resources idle at now (idleCounts): their
// watches end and their slots under maxCountedResources free up. A later
// guarded request starts counting again.
func (c *objectCounts) stopIdle(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gr := range idleCounts(c.resources, now, c.idleAfter) {
		c.resources[gr].stop()
		delete(c.resources, gr)
		c.atCapLogged = false
		c.log.Info("stopped counting objects per namespace for the LIST guard: no guarded LIST or watch-list of the resource", "resource", gr.String(), "for", c.idleAfter.String())
	}
}

// countEagerly starts counting resources (kubectl's names: "pods",
// "deployments.apps"), resolving their versions through discovery, and
// retries those not served yet (a CRD installed later).
func (c *objectCounts) countEagerly(ctx context.Context, resources []string) {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.discovery))
	pending := slices.Clone(resources)
	for len(pending) > 0 {
		var missing []string
		for _, name := range pending {
			gvr, err := mapper.ResourceFor(schema.ParseGroupResource(name).WithVersion(""))
			if err != nil {
				missing = append(missing, name)
				continue
			}
			if !c.countEagerlyOne(ctx, gvr) {
				missing = append(missing, name)
			}
		}
		if pending = missing; len(pending) == 0 {
			return
		}
		mapper.Reset()
		select {
		case <-ctx.Done():
			return
		case <-time.After(30 * time.Second):
		}
	}
}

// countEagerlyOne counts gvr from now on, if the gateway may; false if
// it could not ask the API server, to be retried.
func (c *objectCounts) countEagerlyOne(ctx context.Context, gvr schema.GroupVersionResource) bool {
	gr := gvr.GroupResource()
	c.mu.Lock()
	uncountable := c.isUncountable(gvr, time.Now())
	c.mu.Unlock()
	if uncountable {
		return true
	}
	if c.mayCount != nil {
		ok, err := c.mayCount(ctx, gvr)
		if err != nil {
			c.log.Warn("asking the API server whether the gateway may count a resource for the LIST guard", "resource", gr.String(), "err", err.Error())
			return false
		}
		if !ok {
			c.mu.Lock()
			c.markUncountable(gvr, "--count-resources names it, but the gateway may not list and watch it (ClusterRole rampart-gateway)", time.Time{})
			c.mu.Unlock()
			return true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resources[gr] == nil {
		cctx, stop := context.WithCancel(c.ctx)
		nc := &namespaceCounts{perNS: map[string]int64{}, stop: stop}
		c.start(cctx, gvr, nc)
		c.resources[gr] = nc
	}
	c.resources[gr].eager = true
	return true
}

func (nc *namespaceCounts) add(obj any, delta int64) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	nc.mu.Lock()
	defer nc.mu.Unlock()
	nc.total += delta
	if nc.perNS[ns] += delta; nc.perNS[ns] <= 0 {
		delete(nc.perNS, ns)
	}
}

// run scrapes the API server's object counts until ctx ends; informers
// started by For stop with ctx. The eager resources are counted from the
// start rather than from their first guarded LIST: the first LISTs of a
// storm would otherwise pass uncounted while the count syncs (the API
// server's own metric is refreshed once a minute, so it may not yet know
// of objects created just before).
func (c *objectCounts) run(ctx context.Context, eager []string) {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	if len(eager) > 0 {
		go c.countEagerly(ctx, eager)
	}
	t := time.NewTicker(countScrapeInterval)
	defer t.Stop()
	for {
		c.stopIdle(time.Now())
		if err := c.scrape(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("reading the API server's object counts for the LIST guard (the gateway needs get on nonResourceURL /metrics, ClusterRole rampart-gateway)", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Names of the API server's object-count metric: apiserver_resource_objects
// (group and resource labels) since Kubernetes 1.34, and the older
// apiserver_storage_objects (resource label "RESOURCE.GROUP"), deprecated
// but still there.
const (
	resourceObjectsMetric = "apiserver_resource_objects"
	storageObjectsMetric  = "apiserver_storage_objects"
)

func (c *objectCounts) scrape(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body, err := c.rest.Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	// The API server's /metrics is megabytes of histograms; only the two
	// object-count families are handed to the parser.
	var keep bytes.Buffer
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lines.Scan() {
		line := lines.Text()
		name := line
		if rest, ok := strings.CutPrefix(line, "# "); ok && len(rest) > 5 {
			name = rest[5:] // after "HELP " or "TYPE "
		}
		if strings.HasPrefix(name, resourceObjectsMetric) || strings.HasPrefix(name, storageObjectsMetric) {
			keep.WriteString(line)
			keep.WriteByte('\n')
		}
	}
	if err := lines.Err(); err != nil {
		return err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(&keep)
	if err != nil {
		return err
	}
	counts := objectCountsFrom(families)
	c.mu.Lock()
	c.cluster = counts
	c.mu.Unlock()
	return nil
}

// objectCountsFrom reads the counts, preferring apiserver_resource_objects;
// a count of -1 (the API server failed to read it) is left out.
func objectCountsFrom(families map[string]*dto.MetricFamily) map[schema.GroupResource]int64 {
	counts := map[schema.GroupResource]int64{}
	if f := families[storageObjectsMetric]; f != nil {
		for _, m := range f.GetMetric() {
			if v := m.GetGauge().GetValue(); v >= 0 {
				counts[schema.ParseGroupResource(label(m, "resource"))] = int64(v)
			}
		}
	}
	if f := families[resourceObjectsMetric]; f != nil {
		for _, m := range f.GetMetric() {
			if v := m.GetGauge().GetValue(); v >= 0 {
				counts[schema.GroupResource{Group: label(m, "group"), Resource: label(m, "resource")}] = int64(v)
			}
		}
	}
	return counts
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

var knownObjectsDesc = prometheus.NewDesc("rampart_gateway_known_objects",
	"Objects of each resource in the cluster as the LIST guard knows them: from its own watch once a guarded LIST has started one, else from the API server's apiserver_resource_objects.",
	[]string{"resource"}, nil)

var countedResourcesDesc = prometheus.NewDesc("rampart_gateway_counted_resources",
	fmt.Sprintf("Resources the LIST guard counts per namespace (at most %d; see rampart_gateway_uncounted_lists_total).", maxCountedResources), nil, nil)

func (c *objectCounts) Describe(ch chan<- *prometheus.Desc) {
	ch <- knownObjectsDesc
	ch <- countedResourcesDesc
	c.uncounted.Describe(ch)
}

func (c *objectCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	counts := make(map[schema.GroupResource]int64, len(c.cluster))
	for gr, n := range c.cluster {
		counts[gr] = n
	}
	watched := make(map[schema.GroupResource]*namespaceCounts, len(c.resources))
	for gr, nc := range c.resources {
		watched[gr] = nc
	}
	c.mu.Unlock()
	for gr, nc := range watched {
		if nc.isSynced() {
			nc.mu.Lock()
			counts[gr] = nc.total
			nc.mu.Unlock()
		}
	}
	for gr, n := range counts {
		ch <- prometheus.MustNewConstMetric(knownObjectsDesc, prometheus.GaugeValue, float64(n), gr.String())
	}
	ch <- prometheus.MustNewConstMetric(countedResourcesDesc, prometheus.GaugeValue, float64(len(watched)))
	c.uncounted.Collect(ch)
}
