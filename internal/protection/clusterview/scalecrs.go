package clusterview

import (
	"context"
	"errors"
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
	c.startOnce(ctx, c.scaleCRs, gvr, func() (cache.SharedIndexInformer, error) {
		if c.dynamic == nil {
			return nil, errors.New("no dynamic client")
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(c.dynamic, gvr, metav1.NamespaceAll, 0,
			cache.Indexers{byNamespace: cache.MetaNamespaceIndexFunc}, nil).Informer()
		if err := inf.SetTransform(slimScaled(path)); err != nil {
			return nil, err
		}
		for _, on := range c.onScaleCR {
			if _, err := inf.AddEventHandler(on(gvr)); err != nil {
				return nil, err
			}
		}
		return inf, nil
	})
}

// slimScaled keeps of a custom workload its metadata and its replicas
// (read at path, 1 when unset), under replicasField.
func slimScaled(path string) cache.TransformFunc {
	fields := strings.Split(strings.TrimPrefix(path, "."), ".")
	return func(obj any) (any, error) {
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
	}
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
