package drill

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// settle is how long a drill waits for the cluster to finish what a
// mistake set in motion (garbage collection, namespace deletion).
const settle = 90 * time.Second

func poll(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, cond)
}

func (t Target) namespace(ctx context.Context, name string, labels map[string]string) error {
	_, err := t.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	// The service-account controller must have made "default" before pods
	// can be created.
	return poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := t.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func deployment(name string, replicas int32, labels map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			},
		},
	}
}

// runningPods counts running pods in ns matching selector.
func (t Target) runningPods(ctx context.Context, ns, selector string) (int, error) {
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n, nil
}

func (t Target) waitRunning(ctx context.Context, ns, selector string, want int) error {
	var have int
	err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		have, err = t.runningPods(ctx, ns, selector)
		return err == nil && have == want, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d pods running in %s: %w", have, want, ns, err)
	}
	return nil
}

// steady waits until count returns the same value for three seconds, or
// until settle passes, and returns it.
func steady(ctx context.Context, count func(context.Context) (int, error)) (int, error) {
	last, same := -1, 0
	err := poll(ctx, settle, func(ctx context.Context) (bool, error) {
		n, err := count(ctx)
		if err != nil {
			return false, err
		}
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
		return same >= 10, nil
	})
	if wait.Interrupted(err) {
		return last, nil
	}
	return last, err
}

// crd makes a namespaced CRD with a permissive schema.
func crd(plural, kind, group string, labels map[string]string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group, Labels: labels},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

// createCRD creates a CRD and waits until it serves.
func (t Target) createCRD(ctx context.Context, c *apiextensionsv1.CustomResourceDefinition) (schema.GroupVersionResource, error) {
	gvr := schema.GroupVersionResource{Group: c.Spec.Group, Version: "v1", Resource: c.Spec.Names.Plural}
	if _, err := t.Ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, c, metav1.CreateOptions{}); err != nil {
		return gvr, err
	}
	err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := t.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	return gvr, err
}

// createCustomResources creates n custom resources named by name(i), with
// a few requests in flight.
func (t Target) createCustomResources(ctx context.Context, gvr schema.GroupVersionResource, kind, ns string, n int, name func(int) string, labels map[string]string) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": gvr.GroupVersion().String(), "kind": kind,
					"metadata": map[string]any{"name": name(i), "namespace": ns},
					"spec":     map[string]any{"index": int64(i)},
				}}
				u.SetLabels(labels)
				if _, err := t.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// countCustomResources counts the custom resources of gvr; a resource
// whose CRD is gone has none.
func (t Target) countCustomResources(ctx context.Context, gvr schema.GroupVersionResource) (int, error) {
	list, err := t.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// protection is the label that asks Rampart for a protection, on a
// protected target only.
func (t Target) protection(level v1alpha1.ProtectionLevel) map[string]string {
	if !t.Protected {
		return nil
	}
	return map[string]string{v1alpha1.LabelProtection: string(level)}
}

var unlabel = []byte(`{"metadata":{"labels":{"` + v1alpha1.LabelProtection + `":null,"` + v1alpha1.LabelExplicitReplicas + `":null}}}`)

// cleanupNamespace lifts the drill's protection and deletes what is left,
// so that a drill run against a real cluster leaves nothing behind.
func (t Target) cleanupNamespace(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deps, _ := t.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	for _, d := range deps.Items {
		_, _ = t.Client.AppsV1().Deployments(ns).Patch(ctx, d.Name, types.MergePatchType, unlabel, metav1.PatchOptions{})
	}
	_, _ = t.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, unlabel, metav1.PatchOptions{})
	_ = t.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}

func (t Target) cleanupCRD(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	crds := t.Ext.ApiextensionsV1().CustomResourceDefinitions()
	_, _ = crds.Patch(ctx, name, types.MergePatchType, unlabel, metav1.PatchOptions{})
	c, err := crds.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	gvr := schema.GroupVersionResource{Group: c.Spec.Group, Version: "v1", Resource: c.Spec.Names.Plural}
	_ = t.Dynamic.Resource(gvr).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	// The CRD goes once its resources are gone and Rampart's view sees it.
	_ = poll(ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
		err := crds.Delete(ctx, name, metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	})
}

// deniedBy returns the denial text when err is Rampart's answer.
func deniedBy(err error) (string, error) {
	if apierrors.IsForbidden(err) {
		return err.Error(), nil
	}
	return "", err
}

// dialEtcd connects to the local cluster's etcd as user
// (localcluster.Etcd*User).
func (t Target) dialEtcd(ctx context.Context, user string) (*clientv3.Client, error) {
	return t.Local.EtcdClient(user).Dial(ctx)
}
