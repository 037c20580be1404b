package registrar

import (
	"context"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// listWindows lists every ChangeWindow from the cache, in a stable order.
func listWindows(ctx context.Context, reader client.Reader) ([]v1alpha1.ChangeWindow, error) {
	var list v1alpha1.ChangeWindowList
	if err := reader.List(ctx, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.ChangeWindow) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return list.Items, nil
}
