package clusterview

import (
	"context"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

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
func (c *Informers) watchScaleCR(ctx context.Context, gvr schema.GroupVersionResource, path string) {
	c.mu.RLock()
	_, ok := c.scaleCRs[gvr]
	c.mu.RUnlock()
	if ok || !c.watchable(ctx, gvr) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.scaleCRs[gvr]; ok || c.dynamic == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	fields := strings.Split(strings.TrimPrefix(path, "."), ".")
	inf := dynamicinformer.NewFilteredDynamicInformer(c.dynamic, gvr, metav1.NamespaceAll, 0,
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
	for _, on := range c.onScaleCR {
		if _, err := inf.AddEventHandler(on(gvr)); err != nil {
			cancel()
			return
		}
	}
	c.scaleCRs[gvr] = &crInformer{informer: inf, cancel: cancel}
	go inf.RunWithContext(ctx)
}

// scaleStore is the store of a custom resource with a scale subresource,
// nil if it is not watched.
func (c *Informers) scaleStore(gr schema.GroupResource) cache.Store {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for gvr, inf := range c.scaleCRs {
		if gvr.GroupResource() == gr {
			return inf.informer.GetStore()
		}
	}
	return nil
}

// eachScaleCR calls f, under the read lock, with every watched custom
// resource with a scale subresource.
func (c *Informers) eachScaleCR(f func(gvr schema.GroupVersionResource, store cache.Store)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for gvr, inf := range c.scaleCRs {
		f(gvr, inf.informer.GetStore())
	}
}
