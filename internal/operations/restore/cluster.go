package restore

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// APICluster is the Cluster of a restore through the API server: the
// dynamic client, and a RESTMapper to find an owner's resource from the
// kind its reference names.
type APICluster struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
}

func (c APICluster) resource(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return c.Dynamic.Resource(gvr)
	}
	return c.Dynamic.Resource(gvr).Namespace(namespace)
}

// Live implements Cluster.
func (c APICluster) Live(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool, error) {
	obj, err := c.resource(gvr, namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

// List implements Lister, page by page.
func (c APICluster) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string) ([]unstructured.Unstructured, error) {
	var out []unstructured.Unstructured
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := c.resource(gvr, namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// Owner implements Cluster. An owner of a kind the API server no longer
// serves is gone.
func (c APICluster) Owner(ctx context.Context, ref metav1.OwnerReference, namespace string) (types.UID, bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return "", false, nil
	}
	m, err := c.Mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	if meta.IsNoMatchError(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		namespace = ""
	}
	live, found, err := c.Live(ctx, m.Resource, namespace, ref.Name)
	if !found || err != nil {
		return "", found, err
	}
	return live.GetUID(), true, nil
}

// Create implements Cluster.
func (c APICluster) Create(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	opts := metav1.CreateOptions{FieldManager: "rampart-restore"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	created, err := c.resource(gvr, obj.GetNamespace()).Create(ctx, obj, opts)
	if err != nil || dryRun || gvr.GroupResource() != crdsGR {
		return created, err
	}
	// Its custom resources, next in the plan, can be created only once
	// the API server serves them.
	return created, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := c.resource(gvr, "").Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conditions {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// Update implements Cluster.
func (c APICluster) Update(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	opts := metav1.UpdateOptions{FieldManager: "rampart-restore"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return c.resource(gvr, obj.GetNamespace()).Update(ctx, obj, opts)
}
