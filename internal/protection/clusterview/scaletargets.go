package clusterview

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// byExplicitReplicas indexes workloads labelled rampart.io/explicit-replicas=true.
const byExplicitReplicas = "explicit-replicas"

// workloadResources are the built-in resources with replicas.
var workloadResources = []schema.GroupResource{deployments, statefulSets, replicaSets, replicationControllers}

// ScaleTargets is the view of the replicas guard: which workloads' scale
// subresource a rule guards (their webhook targets), and the labels a
// scale request, which carries none, is judged with.
type ScaleTargets struct {
	Namespaces
	informers *Informers
	changes   chan struct{}
}

func newScaleTargets(c *Informers, ns Namespaces) (*ScaleTargets, error) {
	s := &ScaleTargets{Namespaces: ns, informers: c, changes: make(chan struct{}, 1)}
	for _, gr := range workloadResources {
		if err := c.informer(gr).AddIndexers(cache.Indexers{byExplicitReplicas: explicitReplicas}); err != nil {
			return nil, err
		}
	}
	for _, gr := range append(slices.Clone(workloadResources), namespaces) {
		c.handle(gr, s.labelsHandler())
	}
	c.onScaleCR = append(c.onScaleCR, func(schema.GroupVersionResource) cache.ResourceEventHandler { return s.labelsHandler() })
	return s, nil
}

func explicitReplicas(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetLabels()[v1alpha1.LabelExplicitReplicas] != "true" {
		return nil, nil
	}
	return []string{"true"}, nil
}

// labelsHandler signals Changes when an object comes, goes, or changes its
// labels: what decides whether a workload's scale subresource is guarded
// (its label, or a policy's selectors over it and its namespace).
func (s *ScaleTargets) labelsHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.signal() },
		UpdateFunc: func(old, obj any) {
			o, err1 := meta.Accessor(old)
			n, err2 := meta.Accessor(obj)
			if err1 != nil || err2 != nil || !maps.Equal(o.GetLabels(), n.GetLabels()) {
				s.signal()
			}
		},
		DeleteFunc: func(any) { s.signal() },
	}
}

// Changes signals (coalesced) that the scale targets may have changed.
func (s *ScaleTargets) Changes() <-chan struct{} { return s.changes }

func (s *ScaleTargets) signal() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

// HasSynced is false until the caches hold the whole cluster.
func (s *ScaleTargets) HasSynced() bool { return s.informers.HasSynced() }

// ScaleReplicasPath is a custom resource's spec-replicas JSON path when
// its CRD has a scale subresource.
func (s *ScaleTargets) ScaleReplicasPath(gr schema.GroupResource) (string, bool) {
	return s.informers.ScaleReplicasPath(gr)
}

// Targets are the workloads whose scale subresource a rule guards, as
// "group/resource/namespace/name": labelled ones, and those a policy with
// explicitReplicas selects.
func (s *ScaleTargets) Targets(policies []v1alpha1.ProtectionPolicy) []string {
	targets := s.explicitReplicaTargets()
	for _, gr := range s.workloadResources() {
		guarding := policy.ForResource(policies, policy.Guarding, gr)
		if len(guarding) == 0 {
			continue
		}
		for _, w := range s.workloads(gr) {
			l, known := s.NamespaceLabels(w.GetNamespace())
			nsLabels := policy.NamespaceLabels(w.GetNamespace(), l, known)
			for _, p := range guarding {
				if policy.Covers(p, gr, nsLabels, w.GetLabels()) {
					targets = append(targets, target(gr, w.GetNamespace(), w.GetName()))
					break
				}
			}
		}
	}
	slices.Sort(targets)
	return slices.Compact(targets)
}

func target(gr schema.GroupResource, ns, name string) string {
	return gr.Group + "/" + gr.Resource + "/" + ns + "/" + name
}

// explicitReplicaTargets are the workloads labelled
// rampart.io/explicit-replicas=true.
func (s *ScaleTargets) explicitReplicaTargets() []string {
	var out []string
	s.informers.eachScaleCR(func(gvr schema.GroupVersionResource, store cache.Store) {
		for _, o := range store.List() {
			if m, err := meta.Accessor(o); err == nil && m.GetLabels()[v1alpha1.LabelExplicitReplicas] == "true" {
				out = append(out, target(gvr.GroupResource(), m.GetNamespace(), m.GetName()))
			}
		}
	})
	for _, gr := range workloadResources {
		objs, _ := s.informers.informer(gr).GetIndexer().ByIndex(byExplicitReplicas, "true")
		for _, o := range objs {
			if m, err := meta.Accessor(o); err == nil {
				out = append(out, target(gr, m.GetNamespace(), m.GetName()))
			}
		}
	}
	slices.Sort(out)
	return out
}

// workloadResources are the built-in resources with replicas and the
// custom resources with a scale subresource.
func (s *ScaleTargets) workloadResources() []schema.GroupResource {
	out := slices.Clone(workloadResources)
	s.informers.eachScaleCR(func(gvr schema.GroupVersionResource, _ cache.Store) {
		out = append(out, gvr.GroupResource())
	})
	return out
}

func (s *ScaleTargets) store(gr schema.GroupResource) cache.Store {
	if slices.Contains(workloadResources, gr) {
		return s.informers.informer(gr).GetStore()
	}
	return s.informers.scaleStore(gr)
}

// workloads lists the cached workloads of a resource with replicas.
func (s *ScaleTargets) workloads(gr schema.GroupResource) []metav1.Object {
	store := s.store(gr)
	if store == nil {
		return nil
	}
	objs := store.List()
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// WorkloadLabels are the labels and UID of a workload with replicas.
func (s *ScaleTargets) WorkloadLabels(gr schema.GroupResource, ns, name string) (map[string]string, types.UID, bool) {
	store := s.store(gr)
	if store == nil {
		return nil, "", false
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	obj, ok, err := store.GetByKey(key)
	if err != nil || !ok {
		return nil, "", false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, "", false
	}
	return m.GetLabels(), m.GetUID(), true
}
