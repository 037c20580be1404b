package clusterview

import (
	"context"
	"maps"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// byExplicitReplicas indexes workloads labelled rampart.io/explicit-replicas=true.
const byExplicitReplicas = "explicit-replicas"

// workloadResources are the resources of View.workloads, in order.
var workloadResources = []schema.GroupResource{
	{Group: "apps", Resource: "deployments"},
	{Group: "apps", Resource: "statefulsets"},
	{Group: "apps", Resource: "replicasets"},
	{Resource: "replicationcontrollers"},
}

func explicitReplicas(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetLabels()[v1alpha1.LabelExplicitReplicas] != "true" {
		return nil, nil
	}
	return []string{"true"}, nil
}

// watchExplicitReplicas indexes labelled workloads and signals Changes
// whenever the set of them may have changed.
func (v *View) watchExplicitReplicas() error {
	for _, inf := range v.workloads {
		if err := inf.AddIndexers(cache.Indexers{byExplicitReplicas: explicitReplicas}); err != nil {
			return err
		}
	}
	return nil
}

// labelsHandler signals Changes when an object comes, goes, or changes its
// labels: what decides whether a workload's scale subresource is guarded
// (its label, or a policy's selectors over it and its namespace).
func (v *View) labelsHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { v.signal() },
		UpdateFunc: func(old, obj any) {
			o, err1 := meta.Accessor(old)
			n, err2 := meta.Accessor(obj)
			if err1 != nil || err2 != nil || !maps.Equal(o.GetLabels(), n.GetLabels()) {
				v.signal()
			}
		},
		DeleteFunc: func(any) { v.signal() },
	}
}

// Changes signals (coalesced) that what the webhook configurations depend
// on may have changed.
func (v *View) Changes() <-chan struct{} { return v.changes }

func (v *View) signal() {
	select {
	case v.changes <- struct{}{}:
	default:
	}
}

func hasScale(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, ver := range crd.Spec.Versions {
		if ver.Served && ver.Subresources != nil && ver.Subresources.Scale != nil {
			return true
		}
	}
	return false
}

// watchExplicitCR watches the custom resources of a kind with a scale
// subresource that are labelled rampart.io/explicit-replicas=true: their
// scale requests carry no labels either.
func (v *View) watchExplicitCR(ctx context.Context, gvr schema.GroupVersionResource) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.explicitCRs[gvr]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	inf := v.metadataInformer(gvr, v1alpha1.LabelExplicitReplicas+"=true")
	if _, err := inf.AddEventHandler(v.labelsHandler()); err != nil {
		cancel()
		return
	}
	v.explicitCRs[gvr] = &crInformer{informer: inf, cancel: cancel}
	go inf.RunWithContext(ctx)
}

// ExplicitReplicaTargets implements admission.ClusterView.
func (v *View) ExplicitReplicaTargets() []string {
	var out []string
	v.mu.RLock()
	for gvr, inf := range v.explicitCRs {
		for _, o := range inf.informer.GetStore().List() {
			if m, err := meta.Accessor(o); err == nil {
				out = append(out, gvr.Group+"/"+gvr.Resource+"/"+m.GetNamespace()+"/"+m.GetName())
			}
		}
	}
	v.mu.RUnlock()
	for i, inf := range v.workloads {
		objs, _ := inf.GetIndexer().ByIndex(byExplicitReplicas, "true")
		gr := workloadResources[i]
		for _, o := range objs {
			if m, err := meta.Accessor(o); err == nil {
				out = append(out, gr.Group+"/"+gr.Resource+"/"+m.GetNamespace()+"/"+m.GetName())
			}
		}
	}
	slices.Sort(out)
	return out
}

// Workloads lists the cached workloads of a built-in resource with
// replicas (deployments, statefulsets, replicasets, replicationcontrollers).
func (v *View) Workloads(gr schema.GroupResource) []metav1.Object {
	i := slices.Index(workloadResources, gr)
	if i < 0 {
		return nil
	}
	objs := v.workloads[i].GetStore().List()
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// WorkloadResources are the built-in resources Workloads lists.
func WorkloadResources() []schema.GroupResource { return slices.Clone(workloadResources) }

// NamespaceLabels are a namespace's labels; ok is false if it is unknown.
func (v *View) NamespaceLabels(ns string) (map[string]string, bool) {
	obj, ok, err := v.namespaces.GetStore().GetByKey(ns)
	if err != nil || !ok {
		return nil, false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	return m.GetLabels(), true
}

// WorkloadLabels implements admission.ClusterView.
//
// For a custom resource only the labelled ones are cached: an unlabelled one
// is reported unknown, which the scale webhook treats as unguarded.
func (v *View) WorkloadLabels(gr schema.GroupResource, ns, name string) (map[string]string, types.UID, bool) {
	var store cache.Store
	if i := slices.Index(workloadResources, gr); i >= 0 {
		store = v.workloads[i].GetStore()
	} else {
		v.mu.RLock()
		for gvr, inf := range v.explicitCRs {
			if gvr.GroupResource() == gr {
				store = inf.informer.GetStore()
			}
		}
		v.mu.RUnlock()
	}
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

// PodLabels are a cached pod's labels.
func (v *View) PodLabels(ns, name string) (map[string]string, bool) {
	obj, ok, err := v.pods.GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	return m.GetLabels(), true
}
