// Package clusterview holds the read-only windows on cluster state that
// Rampart's decisions consult, one per consumer: Deletion for the deletion
// engine, ScaleTargets for the replicas guard and its webhook targets,
// Budgets for the budget index, Namespaces for namespace labels,
// LastStates for the recycle bin's outside-API watch. All of
// them read one set of informers (Informers), keyed by resource, kept
// current by watches: a webhook never sends a LIST to the API server
// while judging a request.
package clusterview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/go-logr/logr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
)

// Index names.
const (
	// byOwner indexes live objects by the UIDs of their owners.
	byOwner = "owner"
	// byNamespace indexes every object by namespace.
	byNamespace = cache.NamespaceIndex
)

// The views watch metadata of labelled objects and the few fields of
// pods, claims and workloads their decisions read: every built-in namespaced
// resource but Secrets (see unwatched), and custom resources in the groups
// the operator grants (the chart's customResourceGroups). RBAC cannot leave
// Secrets out of a group wildcard, so the core group is listed by name.
// Nodes are read for their health only: a pod on a NotReady node is
// already unavailable to its budgets.
// +kubebuilder:rbac:groups="",resources=configmaps;endpoints;events;limitranges;namespaces;nodes;persistentvolumeclaims;pods;podtemplates;replicationcontrollers;resourcequotas;serviceaccounts;services,verbs=list;watch
// +kubebuilder:rbac:groups=apps;batch;autoscaling;policy;networking.k8s.io;discovery.k8s.io;storage.k8s.io;coordination.k8s.io;events.k8s.io;rbac.authorization.k8s.io;resource.k8s.io;apiextensions.k8s.io,resources=*,verbs=list;watch

// Built-in resources the views read.
var (
	pods                   = schema.GroupResource{Resource: "pods"}
	claims                 = schema.GroupResource{Resource: "persistentvolumeclaims"}
	namespaces             = schema.GroupResource{Resource: "namespaces"}
	nodes                  = schema.GroupResource{Resource: "nodes"}
	configMaps             = schema.GroupResource{Resource: "configmaps"}
	services               = schema.GroupResource{Resource: "services"}
	replicationControllers = schema.GroupResource{Resource: "replicationcontrollers"}
	deployments            = schema.GroupResource{Group: "apps", Resource: "deployments"}
	statefulSets           = schema.GroupResource{Group: "apps", Resource: "statefulsets"}
	replicaSets            = schema.GroupResource{Group: "apps", Resource: "replicasets"}
	daemonSets             = schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	controllerRevisions    = schema.GroupResource{Group: "apps", Resource: "controllerrevisions"}
	jobs                   = schema.GroupResource{Group: "batch", Resource: "jobs"}
	crdResource            = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
)

// typed are read with their typed informers (slimmed, see slim); the
// others of fixed only by their metadata.
var typed = []schema.GroupVersionResource{
	pods.WithVersion("v1"), claims.WithVersion("v1"), configMaps.WithVersion("v1"), services.WithVersion("v1"),
	replicationControllers.WithVersion("v1"), deployments.WithVersion("v1"), statefulSets.WithVersion("v1"),
	replicaSets.WithVersion("v1"), daemonSets.WithVersion("v1"), controllerRevisions.WithVersion("v1"),
	nodes.WithVersion("v1"), jobs.WithVersion("v1"),
}

var metadataOnly = []schema.GroupVersionResource{namespaces.WithVersion("v1")}

// Informers are the informers every view reads, keyed by resource: the
// built-in ones from one shared factory, and those started as custom
// resources come and go (labelled objects of every namespaced resource,
// every object of a custom resource with a scale subresource). Views attach
// their indexes, counters and handlers before Start.
type Informers struct {
	log       logr.Logger
	core      informers.SharedInformerFactory
	meta      metadatainformer.SharedInformerFactory
	crdInfs   apiextensionsinformers.SharedInformerFactory
	metadata  metadata.Interface
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface

	fixed map[schema.GroupResource]cache.SharedIndexInformer
	crds  cache.SharedIndexInformer
	// handlers are added to their informers at Start, in order.
	handlers []informerHandler
	// onCRD and onCRDDeleted are the views' reactions to CRD events, run
	// after the informers' own.
	onCRD, onCRDDeleted []func(*apiextensionsv1.CustomResourceDefinition)
	// onScaleCR give each new informer of a custom resource with a scale
	// subresource the views' handlers.
	onScaleCR []func(gvr schema.GroupVersionResource) cache.ResourceEventHandler
	// synced are the views' own sync conditions.
	synced []func() bool

	mu sync.RWMutex
	// labelled are metadata informers, one per namespaced resource, of the
	// objects labelled rampart.io/protection.
	labelled map[schema.GroupVersionResource]*crInformer
	// scaleCRs are informers, one per custom resource with a scale
	// subresource, of all its objects slimmed to their metadata and
	// replicas: custom workloads, for the namespace probe, explicit
	// replicas and policies.
	scaleCRs map[schema.GroupVersionResource]*crInformer

	// mayWatch says whether the manager may list and watch a resource in
	// every namespace (a SelfSubjectAccessReview); nil allows all. An
	// informer it may not run would never sync and hold the views unready.
	mayWatch func(context.Context, schema.GroupVersionResource) bool
	// labelsWatched is set once every labelled-object informer has been
	// started: each waits on an access review, and the views are not synced
	// while some are still to come.
	labelsWatched atomic.Bool
	// unseen are resources not watched for lack of rights, logged once.
	unseen map[schema.GroupVersionResource]bool
	// podUse is each pod's requests and limits, for quota peaks.
	podUse *podSummaries
	// InstalledBy is how the manager was installed: the messages about a
	// resource it may not watch name how to grant it there.
	InstalledBy installation.Method

	// ctx is Start's: the informers run until it ends.
	ctx context.Context
}

// runContext is the context the informers run under, nil before Start.
func (c *Informers) runContext() context.Context {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ctx
}

type informerHandler struct {
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandler
}

// crInformer is an informer started and stopped on its own.
type crInformer struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	// gvr is set, and informer nil, for a resource the manager may not watch.
	gvr schema.GroupVersionResource
}

func newInformers(cs kubernetes.Interface, md metadata.Interface, dyn dynamic.Interface, ext apiextensionsclient.Interface, log logr.Logger) (*Informers, error) {
	c := &Informers{
		log:       log,
		meta:      metadatainformer.NewSharedInformerFactory(md, 0),
		crdInfs:   apiextensionsinformers.NewSharedInformerFactory(ext, 0),
		metadata:  md,
		dynamic:   dyn,
		discovery: cs.Discovery(),
		fixed:     map[schema.GroupResource]cache.SharedIndexInformer{},
		labelled:  map[schema.GroupVersionResource]*crInformer{},
		scaleCRs:  map[schema.GroupVersionResource]*crInformer{},
		unseen:    map[schema.GroupVersionResource]bool{},
		podUse:    newPodSummaries(),
	}
	c.core = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(c.podUse.transform(slim)))
	for _, gvr := range typed {
		f, err := c.core.ForResource(gvr)
		if err != nil {
			return nil, err
		}
		c.fixed[gvr.GroupResource()] = f.Informer()
	}
	for _, gvr := range metadataOnly {
		inf := c.meta.ForResource(gvr).Informer()
		if err := inf.AddIndexers(cache.Indexers{byOwner: ownerUIDs}); err != nil {
			return nil, err
		}
		c.fixed[gvr.GroupResource()] = inf
	}
	// ReplicaSets and Jobs are looked up by owner to reach their pods.
	for _, gr := range []schema.GroupResource{replicaSets, jobs} {
		if err := c.fixed[gr].AddIndexers(cache.Indexers{byOwner: ownerUIDs}); err != nil {
			return nil, err
		}
	}
	c.crds = c.crdInfs.Apiextensions().V1().CustomResourceDefinitions().Informer()
	c.handle(pods, c.podUse.handler())
	return c, nil
}

// informer is the informer of a built-in resource the views read.
func (c *Informers) informer(gr schema.GroupResource) cache.SharedIndexInformer {
	inf, ok := c.fixed[gr]
	if !ok {
		panic("clusterview: no informer of " + gr.String())
	}
	return inf
}

// handle adds a handler to a built-in resource's informer at Start.
func (c *Informers) handle(gr schema.GroupResource, h cache.ResourceEventHandler) {
	c.handlers = append(c.handlers, informerHandler{c.informer(gr), h})
}

// count attaches a counter to a built-in resource's informer.
func (c *Informers) count(gr schema.GroupResource, keys func(any) ([]string, error), name func(metav1.Object) string) *counter {
	ctr := newCounter(keys, name)
	c.handle(gr, ctr.Handler())
	return ctr
}

func named(kind string) func(metav1.Object) string {
	return func(m metav1.Object) string { return kind + "/" + m.GetName() }
}

func namespaced(kind string) func(metav1.Object) string {
	return func(m metav1.Object) string { return qualified(m.GetNamespace(), kind+"/"+m.GetName()) }
}

// unwatched are resources the views never watch, whatever the rights:
// Secrets, so that the manager needs no right to read them. A Secret
// labelled rampart.io/protection is still protected against its own delete
// (judged from the request), but does not count among the protected
// objects that keep its namespace from being deleted.
var unwatched = map[schema.GroupResource]bool{{Resource: "secrets"}: true}

// watchable says whether an informer of gvr may run, and logs once the
// resources it may not.
func (c *Informers) watchable(ctx context.Context, gvr schema.GroupVersionResource) bool {
	if unwatched[gvr.GroupResource()] {
		return false
	}
	if c.mayWatch == nil || c.mayWatch(ctx, gvr) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unseen[gvr] {
		c.unseen[gvr] = true
		c.log.Info("not watching a resource the manager may not list and watch: its labelled objects do not count in namespace deletions, a protected CRD of it cannot be deleted, and its replicas are not judged; "+
			c.InstalledBy.Say(grantGroup(gvr.Group)), "resource", gvr.String())
	}
	return false
}

// grantGroup is how the manager gets the right to list and watch the
// resources of group (the chart's manager.customResourceGroups).
func grantGroup(group string) installation.Setting {
	return installation.Setting{
		Helm:   fmt.Sprintf("grant group %s in the chart's manager.customResourceGroups", group),
		Up:     fmt.Sprintf("start the cluster with rampart up --custom-resource-groups %s", group),
		ByHand: fmt.Sprintf("grant the manager list and watch on group %s and restart it", group),
	}
}

// metadataInformer is a metadata-only informer with the namespace and
// owner indexes; label selects by label selector ("" for all). The caller
// runs it.
func (c *Informers) metadataInformer(gvr schema.GroupVersionResource, label string) cache.SharedIndexInformer {
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = label }
	return metadatainformer.NewFilteredMetadataInformer(c.metadata, gvr, metav1.NamespaceAll, 0,
		cache.Indexers{byNamespace: cache.MetaNamespaceIndexFunc, byOwner: ownerUIDs}, tweak).Informer()
}

// Start runs the informers until ctx ends; it returns once the fixed ones
// have synced, so that a replica judges nothing from an empty cache.
func (c *Informers) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	for _, h := range c.handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return err
		}
	}
	if _, err := c.crds.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.crdChanged,
		UpdateFunc: func(_, o any) { c.crdChanged(o) },
		DeleteFunc: c.crdDeleted,
	}); err != nil {
		return err
	}
	c.core.Start(ctx.Done())
	c.meta.Start(ctx.Done())
	c.crdInfs.Start(ctx.Done())
	if err := c.watchLabelled(ctx); err != nil {
		return err
	}
	c.labelsWatched.Store(true)
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		return errors.New("cluster view: caches did not sync")
	}
	c.log.Info("cluster view synced")
	<-ctx.Done()
	c.core.Shutdown()
	c.meta.Shutdown()
	c.crdInfs.Shutdown()
	return nil
}

// NeedLeaderElection is false: every replica serves webhooks from its own views.
func (c *Informers) NeedLeaderElection() bool { return false }

// HasSynced reports whether every labelled-object informer has started,
// and whether the fixed informers and those the views wait for have synced.
func (c *Informers) HasSynced() bool {
	if !c.labelsWatched.Load() || !c.crds.HasSynced() {
		return false
	}
	for _, inf := range c.fixed {
		if !inf.HasSynced() {
			return false
		}
	}
	for _, inf := range c.labelledInformers() {
		if !inf.HasSynced() {
			return false
		}
	}
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}

func (c *Informers) labelledInformers() []cache.SharedIndexInformer {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]cache.SharedIndexInformer, 0, len(c.labelled))
	for _, inf := range c.labelled {
		out = append(out, inf.informer)
	}
	return out
}

// watchLabelled starts a metadata informer of objects labelled
// rampart.io/protection for every namespaced, listable resource the API
// server serves; only labelled objects are transferred and cached.
func (c *Informers) watchLabelled(ctx context.Context) error {
	lists, err := c.discovery.ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		return fmt.Errorf("discovery: %w", err)
	}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
				continue
			}
			c.watchLabelledOf(ctx, gv.WithResource(r.Name))
		}
	}
	return nil
}

func (c *Informers) watchLabelledOf(ctx context.Context, gvr schema.GroupVersionResource) {
	c.startOnce(ctx, c.labelled, gvr, func() (cache.SharedIndexInformer, error) {
		return c.metadataInformer(gvr, v1alpha1.LabelProtection), nil
	})
}

// startOnce runs the informer build makes of gvr and files it in m, unless
// m holds one already or the manager may not watch gvr.
func (c *Informers) startOnce(ctx context.Context, m map[schema.GroupVersionResource]*crInformer, gvr schema.GroupVersionResource, build func() (cache.SharedIndexInformer, error)) {
	c.mu.RLock()
	_, ok := m[gvr]
	c.mu.RUnlock()
	if ok || !c.watchable(ctx, gvr) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := m[gvr]; ok {
		return
	}
	inf, err := build()
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	m[gvr] = &crInformer{informer: inf, cancel: cancel}
	go inf.RunWithContext(ctx)
}

// crdChanged watches the labelled objects of a new namespaced custom
// resource, and every object of one with a scale subresource; then the
// views react.
func (c *Informers) crdChanged(obj any) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	ctx := c.runContext()
	if !ok || ctx == nil {
		return
	}
	gvr, ok := servedGVR(crd)
	if !ok {
		return
	}
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		c.watchLabelledOf(ctx, gvr)
	}
	if path, ok := scalePath(crd); ok {
		c.watchScaleCR(ctx, gvr, path)
	}
	for _, f := range c.onCRD {
		f(crd)
	}
}

func (c *Informers) crdDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	for _, f := range c.onCRDDeleted {
		f(crd)
	}
	// Its resource is gone: stop watching it.
	if gvr, ok := servedGVR(crd); ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range []map[schema.GroupVersionResource]*crInformer{c.labelled, c.scaleCRs} {
			if cur, ok := m[gvr]; ok {
				cur.cancel()
				delete(m, gvr)
			}
		}
	}
}

// CRDs are the cached CRDs, and whether the cache has synced (before, it
// may lack some).
func (c *Informers) CRDs() ([]apiextensionsv1.CustomResourceDefinition, bool) {
	var out []apiextensionsv1.CustomResourceDefinition
	for _, obj := range c.crds.GetStore().List() {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			out = append(out, *crd)
		}
	}
	return out, c.crds.HasSynced()
}

// OnCRDChange calls f after any CRD is added, changed or deleted (after
// the views' own reactions). Call it before Start.
func (c *Informers) OnCRDChange(f func()) {
	each := func(*apiextensionsv1.CustomResourceDefinition) { f() }
	c.onCRD = append(c.onCRD, each)
	c.onCRDDeleted = append(c.onCRDDeleted, each)
}

// eachCRD calls f with every cached CRD.
func (c *Informers) eachCRD(f func(*apiextensionsv1.CustomResourceDefinition)) {
	for _, obj := range c.crds.GetStore().List() {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			f(crd)
		}
	}
}

// servedGVR is the storage version's resource, which every CRD serves.
func servedGVR(crd *apiextensionsv1.CustomResourceDefinition) (schema.GroupVersionResource, bool) {
	for _, ver := range crd.Spec.Versions {
		if ver.Storage && ver.Served {
			return schema.GroupVersionResource{Group: crd.Spec.Group, Version: ver.Name, Resource: crd.Spec.Names.Plural}, true
		}
	}
	for _, ver := range crd.Spec.Versions {
		if ver.Served {
			return schema.GroupVersionResource{Group: crd.Spec.Group, Version: ver.Name, Resource: crd.Spec.Names.Plural}, true
		}
	}
	return schema.GroupVersionResource{}, false
}

// ScaleReplicasPath is the JSON path of spec replicas for a custom resource
// with a scale subresource, e.g. ".spec.replicas"; ok is false otherwise.
func (c *Informers) ScaleReplicasPath(gr schema.GroupResource) (string, bool) {
	obj, ok, err := c.crds.GetStore().GetByKey(gr.Resource + "." + gr.Group)
	if err != nil || !ok {
		return "", false
	}
	return scalePath(obj.(*apiextensionsv1.CustomResourceDefinition))
}
