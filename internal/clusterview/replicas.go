package clusterview

import (
	"context"
	"maps"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
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

// scalePath is the spec-replicas path of a CRD with a scale subresource.
func scalePath(crd *apiextensionsv1.CustomResourceDefinition) (string, bool) {
	for _, ver := range crd.Spec.Versions {
		if ver.Served && ver.Subresources != nil && ver.Subresources.Scale != nil {
			return ver.Subresources.Scale.SpecReplicasPath, true
		}
	}
	return "", false
}

// replicasField is where slimmed custom workloads keep their replicas.
const replicasField = "replicas"

// watchScaleCR watches every object of a custom resource with a scale
// subresource, slimmed to metadata and replicas: their scale requests carry
// no labels, and a namespace holding one with replicas is not empty.
func (v *View) watchScaleCR(ctx context.Context, gvr schema.GroupVersionResource, path string) {
	v.mu.RLock()
	_, ok := v.scaleCRs[gvr]
	v.mu.RUnlock()
	if ok || !v.watchable(ctx, gvr) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.scaleCRs[gvr]; ok || v.dynamic == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	fields := strings.Split(strings.TrimPrefix(path, "."), ".")
	inf := dynamicinformer.NewFilteredDynamicInformer(v.dynamic, gvr, metav1.NamespaceAll, 0,
		cache.Indexers{byNamespace: cache.MetaNamespaceIndexFunc}, nil).Informer()
	_ = inf.SetTransform(func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		replicas, found, _ := unstructured.NestedInt64(u.Object, fields...)
		if !found {
			replicas = 1
		}
		meta := map[string]any{}
		for _, k := range []string{"name", "namespace", "uid", "labels", "resourceVersion", "ownerReferences", "deletionTimestamp"} {
			if val, ok := u.Object["metadata"].(map[string]any)[k]; ok {
				meta[k] = val
			}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": meta, replicasField: replicas,
		}}, nil
	})
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
	for _, h := range []cache.ResourceEventHandler{v.labelsHandler(), scaled.Handler()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			cancel()
			return
		}
	}
	v.scaleCRs[gvr] = &crInformer{informer: inf, cancel: cancel}
	v.scaledCRs[gvr] = scaled
	go inf.RunWithContext(ctx)
}

// ExplicitReplicaTargets implements admission.ClusterView.
func (v *View) ExplicitReplicaTargets() []string {
	var out []string
	v.mu.RLock()
	for gvr, inf := range v.scaleCRs {
		for _, o := range inf.informer.GetStore().List() {
			if m, err := meta.Accessor(o); err == nil && m.GetLabels()[v1alpha1.LabelExplicitReplicas] == "true" {
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

func (v *View) scaleStore(gr schema.GroupResource) cache.Store {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for gvr, inf := range v.scaleCRs {
		if gvr.GroupResource() == gr {
			return inf.informer.GetStore()
		}
	}
	return nil
}

// WorkloadResourcesNow are the resources Workloads lists: the built-in
// ones with replicas and the custom resources with a scale subresource.
func (v *View) WorkloadResourcesNow() []schema.GroupResource {
	out := slices.Clone(workloadResources)
	v.mu.RLock()
	defer v.mu.RUnlock()
	for gvr := range v.scaleCRs {
		out = append(out, gvr.GroupResource())
	}
	return out
}

// Workloads lists the cached workloads of a resource with replicas: the
// built-in ones and custom resources with a scale subresource.
func (v *View) Workloads(gr schema.GroupResource) []metav1.Object {
	var store cache.Store
	if i := slices.Index(workloadResources, gr); i >= 0 {
		store = v.workloads[i].GetStore()
	} else {
		store = v.scaleStore(gr)
	}
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

// NamespaceTerminating says whether a namespace is being deleted.
func (v *View) NamespaceTerminating(ns string) bool {
	obj, ok, err := v.namespaces.GetStore().GetByKey(ns)
	if err != nil || !ok {
		return false
	}
	m, err := meta.Accessor(obj)
	return err == nil && m.GetDeletionTimestamp() != nil
}

// WorkloadLabels implements admission.ClusterView.
func (v *View) WorkloadLabels(gr schema.GroupResource, ns, name string) (map[string]string, types.UID, bool) {
	var store cache.Store
	if i := slices.Index(workloadResources, gr); i >= 0 {
		store = v.workloads[i].GetStore()
	} else {
		store = v.scaleStore(gr)
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
