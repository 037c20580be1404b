// Package clusterview is the read-only picture of the cluster that Rampart's
// admission decisions consult. Every answer comes from informer caches and
// their indexes, kept current by watches: a webhook never sends a LIST to
// the API server while judging a request. It implements
// internal/protection/deletion.View.
package clusterview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/go-logr/logr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/budget"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// Index names.
const (
	// byOwner indexes live objects by the UIDs of their owners.
	byOwner = "owner"
	// byNamespace indexes every object by namespace.
	byNamespace = cache.NamespaceIndex
)

// The view watches metadata of labelled objects and the few fields of
// pods, claims and workloads its decisions read: every built-in namespaced
// resource but Secrets (see unwatched), and custom resources in the groups
// the operator grants (the chart's customResourceGroups). RBAC cannot leave
// Secrets out of a group wildcard, so the core group is listed by name.
// +kubebuilder:rbac:groups="",resources=configmaps;endpoints;events;limitranges;namespaces;persistentvolumeclaims;pods;podtemplates;replicationcontrollers;resourcequotas;serviceaccounts;services,verbs=list;watch
// +kubebuilder:rbac:groups=apps;batch;autoscaling;policy;networking.k8s.io;discovery.k8s.io;storage.k8s.io;coordination.k8s.io;events.k8s.io;rbac.authorization.k8s.io;resource.k8s.io;apiextensions.k8s.io,resources=*,verbs=list;watch

// View is the informer-backed deletion.View.
type View struct {
	log       logr.Logger
	core      informers.SharedInformerFactory
	crdInfs   apiextensionsinformers.SharedInformerFactory
	metadata  metadata.Interface
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface

	pods, claims cache.SharedIndexInformer
	// workloads have replicas: Deployments, StatefulSets, ReplicaSets,
	// ReplicationControllers.
	workloads []cache.SharedIndexInformer
	// owned are informers whose objects commonly have owners: their
	// ownerReferences answer Dependents.
	owned []kindInformer
	// intermediate owners between a workload and its pods.
	replicaSets, jobs cache.SharedIndexInformer
	crds              cache.SharedIndexInformer
	namespaces        cache.SharedIndexInformer

	// counters answer counts in constant time (see counter); each belongs
	// to one informer and is fed by its events.
	livePods, boundClaims *counter
	scaled                []*counter // per workload informer
	podsByOwner           *counter
	ownedBy               []*counter // per owned informer
	counters              map[cache.SharedIndexInformer][]*counter

	mu sync.RWMutex
	// protected are metadata informers, one per namespaced resource, of the
	// objects labelled rampart.io/protection.
	protected map[schema.GroupVersionResource]*crInformer
	// scaleCRs are informers, one per custom resource with a scale
	// subresource, of all its objects slimmed to their metadata and
	// replicas: custom workloads, for the namespace probe, explicit
	// replicas and policies.
	scaleCRs map[schema.GroupVersionResource]*crInformer
	// scaledCRs count, per scaleCRs informer, the objects with replicas > 0
	// by namespace.
	scaledCRs map[schema.GroupVersionResource]*counter
	// customResources are metadata informers of the custom resources of
	// CRDs that are themselves protected, by CRD name.
	customResources map[string]*crInformer

	// policies lists the ProtectionPolicies (see SetPolicies).
	policies func() []v1alpha1.ProtectionPolicy

	// changes signals registration-relevant changes (see Changes).
	changes chan struct{}

	// mayWatch says whether the manager may list and watch a resource in
	// every namespace (a SelfSubjectAccessReview); nil allows all. An
	// informer it may not run would never sync and hold the view unready.
	mayWatch func(context.Context, schema.GroupVersionResource) bool
	// labelsWatched is set once every labelled-object informer has been
	// started: each waits on an access review, and the view is not synced
	// while some are still to come.
	labelsWatched atomic.Bool
	// unseen are resources not watched for lack of rights, logged once.
	unseen map[schema.GroupVersionResource]bool

	budgets      *budget.Index
	onBudgetPods func(pod, ns string, budgets []budget.Key)

	ctx context.Context
}

type kindInformer struct {
	kind string
	cache.SharedIndexInformer
}

// crInformer is an informer the view starts and stops on its own.
type crInformer struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	// gvr is set, and informer nil, for a resource the view may not watch.
	gvr schema.GroupVersionResource
}

var _ deletion.View = (*View)(nil)

// New builds the view; Start runs it.
func New(cfg *rest.Config, log logr.Logger) (*View, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	v, err := newView(cs, md, dyn, ext, log)
	if err != nil {
		return nil, err
	}
	v.mayWatch = func(ctx context.Context, gvr schema.GroupVersionResource) bool {
		for _, verb := range []string{"list", "watch"} {
			r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}},
			}, metav1.CreateOptions{})
			if err != nil || !r.Status.Allowed {
				return false
			}
		}
		return true
	}
	return v, nil
}

// unwatched are resources the view never watches, whatever its rights:
// Secrets, so that the manager needs no right to read them. A Secret
// labelled rampart.io/protection is still protected against its own delete
// (judged from the request), but does not count among the protected
// objects that keep its namespace from being deleted.
var unwatched = map[schema.GroupResource]bool{{Resource: "secrets"}: true}

// watchable says whether the view may run an informer of gvr, and logs
// once the resources it may not.
func (v *View) watchable(ctx context.Context, gvr schema.GroupVersionResource) bool {
	if unwatched[gvr.GroupResource()] {
		return false
	}
	if v.mayWatch == nil || v.mayWatch(ctx, gvr) {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.unseen[gvr] {
		v.unseen[gvr] = true
		v.log.Info("not watching a resource the manager may not list and watch: its labelled objects do not count in namespace deletions, a protected CRD of it cannot be deleted, and its replicas are not judged; grant it through the chart's customResourceGroups", "resource", gvr.String())
	}
	return false
}

func newView(cs kubernetes.Interface, md metadata.Interface, dyn dynamic.Interface, ext apiextensionsclient.Interface, log logr.Logger) (*View, error) {
	v := &View{
		log:             log,
		core:            informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(slim)),
		crdInfs:         apiextensionsinformers.NewSharedInformerFactory(ext, 0),
		metadata:        md,
		discovery:       cs.Discovery(),
		protected:       map[schema.GroupVersionResource]*crInformer{},
		customResources: map[string]*crInformer{},
		scaleCRs:        map[schema.GroupVersionResource]*crInformer{},
		scaledCRs:       map[schema.GroupVersionResource]*counter{},
		dynamic:         dyn,
		unseen:          map[schema.GroupVersionResource]bool{},
		changes:         make(chan struct{}, 1),
		budgets:         budget.NewIndex(),
	}
	v.pods = v.core.Core().V1().Pods().Informer()
	v.claims = v.core.Core().V1().PersistentVolumeClaims().Informer()
	v.replicaSets = v.core.Apps().V1().ReplicaSets().Informer()
	v.workloads = []cache.SharedIndexInformer{
		v.core.Apps().V1().Deployments().Informer(),
		v.core.Apps().V1().StatefulSets().Informer(),
		v.replicaSets,
		v.core.Core().V1().ReplicationControllers().Informer(),
	}
	v.jobs = v.metadataInformer(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "")
	v.namespaces = v.metadataInformer(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "")
	v.owned = []kindInformer{
		{"pod", v.pods}, {"persistentvolumeclaim", v.claims}, {"job", v.jobs},
		{"daemonset", v.core.Apps().V1().DaemonSets().Informer()},
		{"controllerrevision", v.core.Apps().V1().ControllerRevisions().Informer()},
		{"configmap", v.core.Core().V1().ConfigMaps().Informer()},
		{"service", v.core.Core().V1().Services().Informer()},
	}
	for i, inf := range v.workloads {
		v.owned = append(v.owned, kindInformer{workloadKinds[i], inf})
	}
	v.counters = map[cache.SharedIndexInformer][]*counter{}
	v.livePods = v.count(v.pods, livePodNamespace, named("pod"))
	v.boundClaims = v.count(v.claims, boundClaimNamespace, named("persistentvolumeclaim"))
	for i, inf := range v.workloads {
		v.scaled = append(v.scaled, v.count(inf, scaledWorkloadNamespace, named(workloadKinds[i])))
	}
	for _, inf := range v.owned {
		c := v.count(inf.SharedIndexInformer, ownerUIDs, namespaced(inf.kind))
		v.ownedBy = append(v.ownedBy, c)
		if inf.SharedIndexInformer == v.pods {
			v.podsByOwner = c
		}
	}
	if err := v.watchExplicitReplicas(); err != nil {
		return nil, err
	}
	// ReplicaSets and Jobs are looked up by owner to reach their pods.
	if err := v.replicaSets.AddIndexers(cache.Indexers{byOwner: ownerUIDs}); err != nil {
		return nil, err
	}
	v.crds = v.crdInfs.Apiextensions().V1().CustomResourceDefinitions().Informer()
	return v, nil
}

// count attaches a counter to an informer.
func (v *View) count(inf cache.SharedIndexInformer, keys func(any) ([]string, error), name func(metav1.Object) string) *counter {
	c := newCounter(keys, name)
	v.counters[inf] = append(v.counters[inf], c)
	return c
}

func named(kind string) func(metav1.Object) string {
	return func(m metav1.Object) string { return kind + "/" + m.GetName() }
}

func namespaced(kind string) func(metav1.Object) string {
	return func(m metav1.Object) string { return qualified(m.GetNamespace(), kind+"/"+m.GetName()) }
}

// metadataInformer is a metadata-only informer with the owner index; label
// selects by label selector ("" for all).
func (v *View) metadataInformer(gvr schema.GroupVersionResource, label string) cache.SharedIndexInformer {
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = label }
	return metadatainformer.NewFilteredMetadataInformer(v.metadata, gvr, metav1.NamespaceAll, 0,
		cache.Indexers{byNamespace: cache.MetaNamespaceIndexFunc, byOwner: ownerUIDs}, tweak).Informer()
}

// Start runs the informers until ctx ends; it returns once the fixed ones
// have synced, so that a replica judges nothing from an empty cache.
func (v *View) Start(ctx context.Context) error {
	v.ctx = ctx
	for inf, cs := range v.counters {
		for _, c := range cs {
			if _, err := inf.AddEventHandler(c.Handler()); err != nil {
				return err
			}
		}
	}
	if _, err := v.pods.AddEventHandler(v.budgetPodsHandler()); err != nil {
		return err
	}
	for _, inf := range v.workloads {
		if _, err := inf.AddEventHandler(v.workloadReplicasHandler()); err != nil {
			return err
		}
	}
	for _, inf := range append(slices.Clone(v.workloads), v.namespaces) {
		if _, err := inf.AddEventHandler(v.labelsHandler()); err != nil {
			return err
		}
	}
	if _, err := v.crds.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { v.crdChanged(o) },
		UpdateFunc: func(_, o any) { v.crdChanged(o) },
		DeleteFunc: v.crdDeleted,
	}); err != nil {
		return err
	}
	v.core.Start(ctx.Done())
	v.crdInfs.Start(ctx.Done())
	go v.jobs.RunWithContext(ctx)
	go v.namespaces.RunWithContext(ctx)
	if err := v.watchProtectedLabels(ctx); err != nil {
		return err
	}
	v.labelsWatched.Store(true)
	if !cache.WaitForCacheSync(ctx.Done(), v.HasSynced) {
		return errors.New("cluster view: caches did not sync")
	}
	v.log.Info("cluster view synced")
	<-ctx.Done()
	v.core.Shutdown()
	v.crdInfs.Shutdown()
	return nil
}

// NeedLeaderElection is false: every replica serves webhooks from its own view.
func (v *View) NeedLeaderElection() bool { return false }

// HasSynced reports whether every labelled-object informer has started, and
// whether the fixed informers and every informer of a
// protected CRD have synced.
func (v *View) HasSynced() bool {
	if !v.labelsWatched.Load() || !v.crds.HasSynced() || !v.namespaces.HasSynced() {
		return false
	}
	for _, inf := range v.owned {
		if !inf.HasSynced() {
			return false
		}
	}
	for _, inf := range v.protectedInformers() {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (v *View) protectedInformers() []cache.SharedIndexInformer {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]cache.SharedIndexInformer, 0, len(v.protected))
	for _, inf := range v.protected {
		out = append(out, inf.informer)
	}
	return out
}

// watchProtectedLabels starts a metadata informer of objects labelled
// rampart.io/protection for every namespaced, listable resource the API
// server serves; only labelled objects are transferred and cached.
func (v *View) watchProtectedLabels(ctx context.Context) error {
	lists, err := v.discovery.ServerPreferredNamespacedResources()
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
			v.watchProtected(ctx, gv.WithResource(r.Name))
		}
	}
	return nil
}

func (v *View) watchProtected(ctx context.Context, gvr schema.GroupVersionResource) {
	v.mu.RLock()
	_, ok := v.protected[gvr]
	v.mu.RUnlock()
	if ok || !v.watchable(ctx, gvr) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.protected[gvr]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	inf := v.metadataInformer(gvr, v1alpha1.LabelProtection)
	v.protected[gvr] = &crInformer{informer: inf, cancel: cancel}
	go inf.RunWithContext(ctx)
}

// Settling time for informers the view starts after Start: a request that
// arrives before they sync is judged on what they hold by then.
const lateSyncWait = 5 * time.Second

// crdChanged watches the custom resources of a CRD that is protected, and
// the labelled objects of a new namespaced custom resource type.
func (v *View) crdChanged(obj any) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || v.ctx == nil {
		return
	}
	gvr, ok := servedGVR(crd)
	if !ok {
		return
	}
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		v.watchProtected(v.ctx, gvr)
	}
	if path, ok := scalePath(crd); ok {
		v.watchScaleCR(v.ctx, gvr, path)
	}
	protected := crd.Labels[v1alpha1.LabelProtection] != "" || protects(v.listPolicies(), crdResource, nil, crd.Labels)
	v.mu.RLock()
	cur, watching := v.customResources[crd.Name]
	v.mu.RUnlock()
	visible := protected && (!watching || cur.informer == nil) && v.watchable(v.ctx, gvr)
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, watching = v.customResources[crd.Name]
	switch {
	case protected && (!watching || cur.informer == nil) && !visible:
		// Blind: CustomResources refuses rather than count none.
		v.customResources[crd.Name] = &crInformer{gvr: gvr, cancel: func() {}}
	case protected && (!watching || cur.informer == nil):
		ctx, cancel := context.WithCancel(v.ctx)
		inf := v.metadataInformer(gvr, "")
		v.customResources[crd.Name] = &crInformer{informer: inf, cancel: cancel}
		go inf.RunWithContext(ctx)
	case !protected && watching:
		cur.cancel()
		delete(v.customResources, crd.Name)
	}
}

// SetPolicies gives the view the ProtectionPolicies, so that it counts the
// custom resources of CRDs a policy protects and the objects a policy
// protects inside a namespace, as it does for labelled ones. Call it before
// Start, and Resync when policies change.
func (v *View) SetPolicies(list func() []v1alpha1.ProtectionPolicy) { v.policies = list }

func (v *View) listPolicies() []v1alpha1.ProtectionPolicy {
	if v.policies == nil {
		return nil
	}
	return v.policies()
}

// protects says whether one of the policies, with a protection level,
// covers an object (nsLabels nil for cluster-scoped objects).
func protects(policies []v1alpha1.ProtectionPolicy, gr schema.GroupResource, nsLabels, labels map[string]string) bool {
	for i := range policies {
		if policies[i].Spec.Protection != "" && policy.Covers(&policies[i], gr, nsLabels, labels) {
			return true
		}
	}
	return false
}

var crdResource = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// Resync re-evaluates which CRDs are protected.
func (v *View) Resync() {
	for _, obj := range v.crds.GetStore().List() {
		v.crdChanged(obj)
	}
}

func (v *View) crdDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.customResources[crd.Name]; ok {
		cur.cancel()
		delete(v.customResources, crd.Name)
	}
	// Its resource is gone: stop watching it for labelled objects.
	if gvr, ok := servedGVR(crd); ok {
		for _, m := range []map[schema.GroupVersionResource]*crInformer{v.protected, v.scaleCRs} {
			if cur, ok := m[gvr]; ok {
				cur.cancel()
				delete(m, gvr)
			}
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
func (v *View) ScaleReplicasPath(gr schema.GroupResource) (string, bool) {
	obj, ok, err := v.crds.GetStore().GetByKey(gr.Resource + "." + gr.Group)
	if err != nil || !ok {
		return "", false
	}
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	for _, ver := range crd.Spec.Versions {
		if ver.Served && ver.Subresources != nil && ver.Subresources.Scale != nil {
			return ver.Subresources.Scale.SpecReplicasPath, true
		}
	}
	return "", false
}

// --- deletion.View ---

// LivePods implements deletion.View.
func (v *View) LivePods(ns string) deletion.Sample { return v.livePods.Sample(ns) }

// BoundClaims implements deletion.View.
func (v *View) BoundClaims(ns string) deletion.Sample { return v.boundClaims.Sample(ns) }

// ScaledWorkloads implements deletion.View.
func (v *View) ScaledWorkloads(ns string) deletion.Sample {
	var s deletion.Sample
	for _, c := range v.scaled {
		s = merge(s, c.Sample(ns))
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.scaledCRs {
		s = merge(s, c.Sample(ns))
	}
	return s
}

var workloadKinds = []string{"deployment", "statefulset", "replicaset", "replicationcontroller"}

// ProtectedObjects implements deletion.View.
//
// Labelled objects of any resource are counted from their own informers;
// objects a policy protects, from the informers the view keeps (pods,
// claims, workloads, jobs, config maps, services). That costs a scan of
// the namespace's objects of those resources, once per namespace DELETE.
func (v *View) ProtectedObjects(ns string) deletion.Sample {
	v.mu.RLock()
	var s deletion.Sample
	for gvr, inf := range v.protected {
		s = merge(s, sampleOf(inf.informer.GetIndexer(), byNamespace, ns, gvr.GroupResource().String(), false))
	}
	v.mu.RUnlock()
	// The policies are listed once per namespace DELETE, not per object.
	policies := v.listPolicies()
	if len(policies) == 0 {
		return s
	}
	nsLabels, _ := v.NamespaceLabels(ns)
	if nsLabels == nil {
		nsLabels = map[string]string{}
	}
	for _, inf := range v.owned {
		gr := ownedResources[inf.kind]
		if !coversResource(policies, gr) {
			continue
		}
		objs, _ := inf.GetIndexer().ByIndex(byNamespace, ns)
		for _, o := range objs {
			m, err := meta.Accessor(o)
			if err != nil || m.GetLabels()[v1alpha1.LabelProtection] != "" { // counted above
				continue
			}
			if protects(policies, gr, nsLabels, m.GetLabels()) {
				s = merge(s, deletion.Sample{Count: 1, Examples: []string{inf.kind + "/" + m.GetName()}})
			}
		}
	}
	return s
}

func coversResource(policies []v1alpha1.ProtectionPolicy, gr schema.GroupResource) bool {
	for i := range policies {
		if policies[i].Spec.Protection != "" && policy.CoversResource(&policies[i], gr) {
			return true
		}
	}
	return false
}

// ownedResources are the resources of View.owned, by kind name.
var ownedResources = map[string]schema.GroupResource{
	"pod": {Resource: "pods"}, "persistentvolumeclaim": {Resource: "persistentvolumeclaims"},
	"job": {Group: "batch", Resource: "jobs"}, "daemonset": {Group: "apps", Resource: "daemonsets"},
	"controllerrevision": {Group: "apps", Resource: "controllerrevisions"},
	"configmap":          {Resource: "configmaps"}, "service": {Resource: "services"},
	"deployment": {Group: "apps", Resource: "deployments"}, "statefulset": {Group: "apps", Resource: "statefulsets"},
	"replicaset": {Group: "apps", Resource: "replicasets"}, "replicationcontroller": {Resource: "replicationcontrollers"},
}

// CustomResources implements deletion.View.
func (v *View) CustomResources(crd string) deletion.Sample {
	v.mu.RLock()
	cur, ok := v.customResources[crd]
	v.mu.RUnlock()
	if !ok {
		return deletion.Sample{}
	}
	if cur.informer == nil {
		// Unseen custom resources may exist: count one, and say why.
		return deletion.Sample{Count: 1, Examples: []string{fmt.Sprintf(
			"(unknown: Rampart may not list %s; grant group %s in the chart's customResourceGroups)", cur.gvr.GroupResource(), cur.gvr.Group)}}
	}
	if !cur.informer.HasSynced() {
		// Judge on a synced cache only: wait a little for a CRD that has
		// just been protected.
		ctx, cancel := context.WithTimeout(v.ctx, lateSyncWait)
		defer cancel()
		cache.WaitForCacheSync(ctx.Done(), cur.informer.HasSynced)
	}
	items := cur.informer.GetStore().List()
	s := deletion.Sample{Count: len(items)}
	for _, o := range items {
		if len(s.Examples) == deletion.MaxExamples {
			break
		}
		if m, err := meta.Accessor(o); err == nil {
			s.Examples = append(s.Examples, qualified(m.GetNamespace(), m.GetName()))
		}
	}
	slices.Sort(s.Examples)
	return s
}

// Dependents implements deletion.View.
func (v *View) Dependents(uid types.UID) deletion.Sample {
	var s deletion.Sample
	for _, c := range v.ownedBy {
		s = merge(s, c.Sample(string(uid)))
	}
	return s
}

// LivePodsOf implements deletion.View.
func (v *View) LivePodsOf(uid types.UID) deletion.Sample {
	s := v.podsByOwner.Sample(string(uid))
	for _, mid := range []cache.SharedIndexInformer{v.replicaSets, v.jobs} {
		owned, _ := mid.GetIndexer().ByIndex(byOwner, string(uid))
		for _, o := range owned {
			if m, err := meta.Accessor(o); err == nil {
				s = merge(s, v.podsByOwner.Sample(string(m.GetUID())))
			}
		}
	}
	return s
}
