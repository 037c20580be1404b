package clusterview

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// Deletion is the deletion engine's view (deletion.View): counts of live
// pods, bound claims, scaled workloads, dependents and protected objects,
// each answered in constant time by counters fed by the informers, and the
// custom resources of protected CRDs.
type Deletion struct {
	Namespaces
	informers *Informers

	livePods, boundClaims *counter
	scaled                []*counter // per built-in workload resource
	podsByOwner           *counter
	ownedBy               []*counter // per owned resource

	mu sync.RWMutex
	// scaledCRs count, per custom resource with a scale subresource, the
	// objects with replicas > 0 by namespace.
	scaledCRs map[schema.GroupVersionResource]*counter
	// customResources are metadata informers of the custom resources of
	// CRDs that are themselves protected, by CRD name.
	customResources map[string]*crInformer

	// policies lists the ProtectionPolicies (see SetPolicies).
	policies func() []v1alpha1.ProtectionPolicy
}

var _ deletion.View = (*Deletion)(nil)

// ownedKind is a resource whose objects commonly have owners: their
// ownerReferences answer Dependents.
type ownedKind struct {
	kind string
	gr   schema.GroupResource
}

var owned = []ownedKind{
	{"pod", pods}, {"persistentvolumeclaim", claims}, {"job", jobs}, {"daemonset", daemonSets},
	{"controllerrevision", controllerRevisions}, {"configmap", configMaps}, {"service", services},
	{"deployment", deployments}, {"statefulset", statefulSets}, {"replicaset", replicaSets},
	{"replicationcontroller", replicationControllers},
}

var workloadKinds = map[schema.GroupResource]string{
	deployments: "deployment", statefulSets: "statefulset", replicaSets: "replicaset", replicationControllers: "replicationcontroller",
}

func newDeletion(c *Informers, ns Namespaces) (*Deletion, error) {
	d := &Deletion{Namespaces: ns, informers: c,
		scaledCRs: map[schema.GroupVersionResource]*counter{}, customResources: map[string]*crInformer{}}
	d.livePods = c.count(pods, livePodNamespace, named("pod"))
	d.boundClaims = c.count(claims, boundClaimNamespace, named("persistentvolumeclaim"))
	for _, gr := range workloadResources {
		d.scaled = append(d.scaled, c.count(gr, scaledWorkloadNamespace, named(workloadKinds[gr])))
	}
	for _, o := range owned {
		ctr := c.count(o.gr, ownerUIDs, namespaced(o.kind))
		d.ownedBy = append(d.ownedBy, ctr)
		if o.gr == pods {
			d.podsByOwner = ctr
		}
	}
	c.onScaleCR = append(c.onScaleCR, d.countScaled)
	c.onCRD = append(c.onCRD, d.crdChanged)
	c.onCRDDeleted = append(c.onCRDDeleted, d.crdDeleted)
	return d, nil
}

// countScaled counts the objects of a custom resource with replicas > 0.
func (d *Deletion) countScaled(gvr schema.GroupVersionResource) cache.ResourceEventHandler {
	scaled := newCounter(func(obj any) ([]string, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, nil
		}
		if n, _, _ := unstructured.NestedInt64(u.Object, replicasField); n > 0 {
			return []string{u.GetNamespace()}, nil
		}
		return nil, nil
	}, named(gvr.GroupResource().String()))
	d.mu.Lock()
	d.scaledCRs[gvr] = scaled
	d.mu.Unlock()
	return scaled.Handler()
}

// HasSynced is false until the caches hold the whole cluster.
func (d *Deletion) HasSynced() bool { return d.informers.HasSynced() }

// ScaleReplicasPath is a custom resource's spec-replicas JSON path when
// its CRD has a scale subresource.
func (d *Deletion) ScaleReplicasPath(gr schema.GroupResource) (string, bool) {
	return d.informers.ScaleReplicasPath(gr)
}

// Settling time for informers started after Start: a request that
// arrives before they sync is judged on what they hold by then.
const lateSyncWait = 5 * time.Second

// crdChanged watches the custom resources of a CRD that is protected.
func (d *Deletion) crdChanged(crd *apiextensionsv1.CustomResourceDefinition) {
	ctx := d.informers.ctx
	gvr, ok := servedGVR(crd)
	if !ok || ctx == nil {
		return
	}
	protected := crd.Labels[v1alpha1.LabelProtection] != "" || policy.Any(d.listPolicies(), policy.Protecting, crdResource, nil, crd.Labels)
	d.mu.RLock()
	cur, watching := d.customResources[crd.Name]
	d.mu.RUnlock()
	visible := protected && (!watching || cur.informer == nil) && d.informers.watchable(ctx, gvr)
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, watching = d.customResources[crd.Name]
	switch {
	case protected && (!watching || cur.informer == nil) && !visible:
		// Blind: CustomResources refuses rather than count none.
		d.customResources[crd.Name] = &crInformer{gvr: gvr, cancel: func() {}}
	case protected && (!watching || cur.informer == nil):
		ctx, cancel := context.WithCancel(ctx)
		inf := d.informers.metadataInformer(gvr, "")
		d.customResources[crd.Name] = &crInformer{informer: inf, cancel: cancel}
		go inf.RunWithContext(ctx)
	case !protected && watching:
		cur.cancel()
		delete(d.customResources, crd.Name)
	}
}

func (d *Deletion) crdDeleted(crd *apiextensionsv1.CustomResourceDefinition) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.customResources[crd.Name]; ok {
		cur.cancel()
		delete(d.customResources, crd.Name)
	}
}

// SetPolicies gives the view the ProtectionPolicies, so that it counts the
// custom resources of CRDs a policy protects and the objects a policy
// protects inside a namespace, as it does for labelled ones. Call it before
// Start, and Resync when policies change.
func (d *Deletion) SetPolicies(list func() []v1alpha1.ProtectionPolicy) { d.policies = list }

// Resync re-evaluates which CRDs are protected.
func (d *Deletion) Resync() { d.informers.eachCRD(d.crdChanged) }

func (d *Deletion) listPolicies() []v1alpha1.ProtectionPolicy {
	if d.policies == nil {
		return nil
	}
	return d.policies()
}

// LivePods implements deletion.View.
func (d *Deletion) LivePods(ns string) deletion.Sample { return d.livePods.Sample(ns) }

// BoundClaims implements deletion.View.
func (d *Deletion) BoundClaims(ns string) deletion.Sample { return d.boundClaims.Sample(ns) }

// ScaledWorkloads implements deletion.View.
func (d *Deletion) ScaledWorkloads(ns string) deletion.Sample {
	var s deletion.Sample
	for _, c := range d.scaled {
		s = merge(s, c.Sample(ns))
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, c := range d.scaledCRs {
		s = merge(s, c.Sample(ns))
	}
	return s
}

// ProtectedObjects implements deletion.View.
//
// Labelled objects of any resource are counted from their own informers;
// objects a policy protects, from the informers of owned resources (pods,
// claims, workloads, jobs, config maps, services). That costs a scan of
// the namespace's objects of those resources, once per namespace DELETE.
func (d *Deletion) ProtectedObjects(ns string) deletion.Sample {
	d.informers.mu.RLock()
	var s deletion.Sample
	for gvr, inf := range d.informers.labelled {
		s = merge(s, sampleOf(inf.informer.GetIndexer(), byNamespace, ns, gvr.GroupResource().String(), false))
	}
	d.informers.mu.RUnlock()
	// The policies are listed once per namespace DELETE, not per object.
	policies := d.listPolicies()
	if len(policies) == 0 {
		return s
	}
	l, known := d.NamespaceLabels(ns)
	nsLabels := policy.NamespaceLabels(ns, l, known)
	for _, o := range owned {
		if len(policy.ForResource(policies, policy.Protecting, o.gr)) == 0 {
			continue
		}
		objs, _ := d.informers.informer(o.gr).GetIndexer().ByIndex(byNamespace, ns)
		for _, obj := range objs {
			m, err := meta.Accessor(obj)
			if err != nil || m.GetLabels()[v1alpha1.LabelProtection] != "" { // counted above
				continue
			}
			if policy.Any(policies, policy.Protecting, o.gr, nsLabels, m.GetLabels()) {
				s = merge(s, deletion.Sample{Count: 1, Examples: []string{o.kind + "/" + m.GetName()}})
			}
		}
	}
	return s
}

// CustomResources implements deletion.View.
func (d *Deletion) CustomResources(crd string) deletion.Sample {
	d.mu.RLock()
	cur, ok := d.customResources[crd]
	d.mu.RUnlock()
	if !ok {
		return deletion.Sample{}
	}
	if cur.informer == nil {
		// Unseen custom resources may exist: count one, and say why.
		return deletion.Sample{Count: 1, Examples: []string{fmt.Sprintf(
			"(unknown: Rampart may not list %s; %s)", cur.gvr.GroupResource(), d.informers.InstalledBy.Say(grantGroup(cur.gvr.Group)))}}
	}
	if !cur.informer.HasSynced() {
		// Judge on a synced cache only: wait a little for a CRD that has
		// just been protected.
		ctx, cancel := context.WithTimeout(d.informers.ctx, lateSyncWait)
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
func (d *Deletion) Dependents(uid types.UID) deletion.Sample {
	var s deletion.Sample
	for _, c := range d.ownedBy {
		s = merge(s, c.Sample(string(uid)))
	}
	return s
}

// LivePodsOf implements deletion.View.
func (d *Deletion) LivePodsOf(uid types.UID) deletion.Sample {
	s := d.podsByOwner.Sample(string(uid))
	for _, mid := range []schema.GroupResource{replicaSets, jobs} {
		owned, _ := d.informers.informer(mid).GetIndexer().ByIndex(byOwner, string(uid))
		for _, o := range owned {
			if m, err := meta.Accessor(o); err == nil {
				s = merge(s, d.podsByOwner.Sample(string(m.GetUID())))
			}
		}
	}
	return s
}
