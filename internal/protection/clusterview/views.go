package clusterview

import (
	"context"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Views are the views over one set of informers.
type Views struct {
	*Informers
	Deletion     *Deletion
	ScaleTargets *ScaleTargets
	Budgets      *Budgets
	Namespaces   Namespaces
	Workloads    Workloads
	LastStates   *LastStates
}

// New builds the views; Start (of the Informers) runs them.
func New(cfg *rest.Config, log logr.Logger) (*Views, error) {
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
	v, err := newViews(cs, md, dyn, ext, log)
	if err != nil {
		return nil, err
	}
	v.mayWatch = MayWatch(cs)
	return v, nil
}

// MayWatch says whether the client may list and watch a resource in every
// namespace (a SelfSubjectAccessReview per verb).
func MayWatch(cs kubernetes.Interface) func(context.Context, schema.GroupVersionResource) bool {
	return func(ctx context.Context, gvr schema.GroupVersionResource) bool {
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
}

func newViews(cs kubernetes.Interface, md metadata.Interface, dyn dynamic.Interface, ext apiextensionsclient.Interface, log logr.Logger) (*Views, error) {
	inf, err := newInformers(cs, md, dyn, ext, log)
	if err != nil {
		return nil, err
	}
	v := &Views{Informers: inf, Namespaces: Namespaces{inf.fixed[namespaces]}, Workloads: Workloads{inf}, LastStates: newLastStates(inf)}
	if v.Deletion, err = newDeletion(inf, v.Namespaces); err != nil {
		return nil, err
	}
	if v.ScaleTargets, err = newScaleTargets(inf, v.Namespaces); err != nil {
		return nil, err
	}
	v.Budgets = newBudgets(inf)
	return v, nil
}
