package manager

import (
	"context"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// cachedPolicies reads ProtectionPolicies from the manager's cache, and a
// policy the cache does not hold yet (its webhook called before the watch
// delivered it) from the API server.
type cachedPolicies struct{ reader, live client.Reader }

func (c cachedPolicies) Policy(ctx context.Context, name string) (*v1alpha1.ProtectionPolicy, bool, error) {
	p := &v1alpha1.ProtectionPolicy{}
	err := c.reader.Get(ctx, client.ObjectKey{Name: name}, p)
	if apierrors.IsNotFound(err) && c.live != nil {
		err = c.live.Get(ctx, client.ObjectKey{Name: name}, p)
	}
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return p, err == nil, err
}

// liveLabels reads a workload's labels from the API server (a list by
// name: the manager may list any resource, not get it).
func liveLabels(meta metadata.Interface) func(context.Context, schema.GroupVersionResource, string, string) (map[string]string, bool, error) {
	return func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error) {
		l, err := meta.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil || len(l.Items) == 0 {
			return nil, false, err
		}
		return l.Items[0].GetLabels(), true, nil
	}
}

// ListLive lists every policy from the API server.
func (c cachedPolicies) ListLive(ctx context.Context) ([]v1alpha1.ProtectionPolicy, error) {
	return cachedPolicies{reader: c.live}.List(ctx)
}

func (c cachedPolicies) List(ctx context.Context) ([]v1alpha1.ProtectionPolicy, error) {
	var list v1alpha1.ProtectionPolicyList
	if err := c.reader.List(ctx, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.ProtectionPolicy) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}
