package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

var cascading = map[string]string{protectionLabel: "Cascading"}

func newDeployment(name string, replicas int32, labels map[string]string) *appsv1.Deployment {
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

func mustForbid(t *testing.T, err error, wantIn ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want Rampart's denial", err)
	}
	for _, w := range wantIn {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("denial %q lacks %q", err, w)
		}
	}
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
}

// scaleToZero scales a deployment to 0 and waits until its pods are gone.
func scaleToZero(t *testing.T, env *clustertest.Env, ns, name string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"spec":{"replicas":0}}`)
	if _, err := env.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pods of "+name+" gone", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		return err == nil && len(pods.Items) == 0, err
	})
}

func TestCascadingNamespace(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	name := uniqueName("shop")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: cascading}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Empty, it may go; but first fill it.
	if _, err := env.Client.AppsV1().Deployments(name).Create(ctx, newDeployment("web", 3, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, name, "app=web", 3, 30*time.Second)

	err := env.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	mustForbid(t, err, fmt.Sprintf(`namespace %q`, name), "rampart.io/protection=Cascading",
		"workloads with replicas > 0", "3 non-terminal pods", "kubectl rampart scale -n "+name)

	// A protected object inside keeps it too, even with no workloads.
	scaleToZero(t, env, name, "web")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keys", Labels: map[string]string{protectionLabel: "Always"}}}
	if _, err := env.Client.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the protected ConfigMap to hold the namespace", func(ctx context.Context) (bool, error) {
		err := env.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "1 protected objects"), err
	})

	// Emptied of everything that matters, it can be deleted.
	if _, err := env.Client.CoreV1().ConfigMaps(name).Patch(ctx, "keys", types.MergePatchType, []byte(`{"metadata":{"labels":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the emptied namespace to be deletable", func(ctx context.Context) (bool, error) {
		err := env.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		return err == nil, err
	})
}

func TestCascadingNamespaceWithBoundVolume(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	name := uniqueName("data")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: cascading}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: name, Name: "db-data"},
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "db-data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(""),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(name).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim bound by the volume controller", func(ctx context.Context) (bool, error) {
		c, err := env.Client.CoreV1().PersistentVolumeClaims(name).Get(ctx, "db-data", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, err
	})
	eventually(t, "the bound claim to hold the namespace", func(ctx context.Context) (bool, error) {
		err := env.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "1 bound PersistentVolumeClaims (persistentvolumeclaim/db-data)"), err
	})
}

func TestCascadingWorkloadNeedsExplicitScaleToZero(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	deploys := env.Client.AppsV1().Deployments(ns)
	if _, err := deploys.Create(ctx, newDeployment("web", 3, cascading), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, ns, "app=web", 3, 30*time.Second)

	err := deploys.Delete(ctx, "web", metav1.DeleteOptions{})
	mustForbid(t, err, "3 desired replicas", "3 live pods",
		"kubectl rampart scale -n "+ns+" deployments.apps/web --replicas 0 && kubectl delete -n "+ns+" deployments.apps/web")

	// Also through kubectl, the way most deletes arrive.
	out, kerr := env.Kubectl(t, "delete", "-n", ns, "deployment/web")
	if kerr == nil || !strings.Contains(out, "Scale it to 0 first") {
		t.Fatalf("kubectl delete of a Cascading deployment: err=%v\n%s", kerr, out)
	}

	// At 0 replicas but with pods still running: still denied; once the
	// pods are gone, allowed.
	scaleToZero(t, env, ns, "web")
	eventually(t, "the scaled-down deployment to be deletable", func(ctx context.Context) (bool, error) {
		err := deploys.Delete(ctx, "web", metav1.DeleteOptions{})
		return err == nil, err
	})
}

func TestCascadingWorkloadOrphanDeleteKeepsPods(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	deploys := env.Client.AppsV1().Deployments(ns)
	if _, err := deploys.Create(ctx, newDeployment("api", 2, cascading), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, ns, "app=api", 2, 30*time.Second)
	if err := deploys.Delete(ctx, "api", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatalf("orphan delete cascades nothing and must pass: %v", err)
	}
	time.Sleep(2 * time.Second) // the garbage collector would have acted by now
	env.WaitPodsRunning(t, ns, "app=api", 2, 10*time.Second)
}

func TestCascadingOwnerWithDependents(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	parent, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parent", Labels: cascading}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: parent.UID,
	}}}}
	if _, err := cms.Create(ctx, child, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dependent to hold its owner", func(ctx context.Context) (bool, error) {
		err := cms.Delete(ctx, "parent", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "1 live dependents ("+ns+"/configmap/child)"), err
	})
	if err := cms.Delete(ctx, "parent", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatalf("orphan delete of an owner: %v", err)
	}
}

// DeleteCollection: the API server asks the webhook about each item.
func TestDeleteCollectionJudgesEachItem(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	for name, labels := range map[string]map[string]string{
		"a": nil, "b": nil, "guarded": {protectionLabel: "Always"},
	} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	mustForbid(t, err, `configmap "guarded"`)
	left, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range left.Items {
		names[c.Name] = true
	}
	if !names["guarded"] {
		t.Fatal("DeleteCollection removed the protected ConfigMap")
	}
}

// The garbage collector's deletes are judged like anyone's: a protected
// object owned by a deleted parent survives, and the denial is recorded
// against the collector.
func TestGarbageCollectorCannotDeleteProtectedDependents(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	parent, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "release"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "release", UID: parent.UID}}
	for name, labels := range map[string]map[string]string{"plain": nil, "precious": {protectionLabel: "Always"}} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owned}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.Delete(ctx, "release", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the garbage collector to delete the unprotected dependent", func(ctx context.Context) (bool, error) {
		_, err := cms.Get(ctx, "plain", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	eventually(t, "the garbage collector's denied delete recorded", func(ctx context.Context) (bool, error) {
		list, err := env.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=precious,reason=DeleteDenied"})
		return err == nil && len(list.Items) > 0 && strings.Contains(list.Items[0].Note, "generic-garbage-collector"), err
	})
	if _, err := cms.Get(ctx, "precious", metav1.GetOptions{}); err != nil {
		t.Fatalf("the protected dependent was garbage-collected: %v", err)
	}
}

func TestCascadingCRD(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ext := apiextensionsclient.NewForConfigOrDie(env.Config)
	grantCustomResources(t, env, "cascade.example.com")
	crd := widgetCRD("widgets.cascade.example.com", cascading)
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "cascade.example.com", Version: "v1", Resource: "widgets"}
	ns := env.Namespace(t)
	eventually(t, "the CRD to serve", func(ctx context.Context) (bool, error) {
		_, err := env.Dynamic.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	for i := range 5 {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cascade.example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("w%d", i)},
		}}
		if _, err := env.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	eventually(t, "custom resources to hold the CRD", func(ctx context.Context) (bool, error) {
		err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "5 custom resources ("+ns+"/w0"), err
	})
	if err := env.Dynamic.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the emptied CRD to be deletable", func(ctx context.Context) (bool, error) {
		err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{})
		return err == nil, err
	})
}

func widgetCRD(name string, labels map[string]string) *apiextensionsv1.CustomResourceDefinition {
	plural, group, _ := strings.Cut(name, ".")
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: "Widget", ListKind: "WidgetList", Singular: "widget"},
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

// A protected CRD whose custom resources the manager may not list (its
// group is not among the chart's customResourceGroups) might still have
// instances: its delete is refused, naming what to grant the way that
// applies on this local cluster: rampart up's flag, not the chart's value
// (charts/chart_test.go shows the chart's).
func TestCascadingCRDRampartCannotSee(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	crds := apiextensionsclient.NewForConfigOrDie(env.Config).ApiextensionsV1().CustomResourceDefinitions()
	crd := widgetCRD("widgets.unseen.example.com", cascading)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the CRD's delete to be refused", func(ctx context.Context) (bool, error) {
		err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err), nil
	})
	err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{})
	mustForbid(t, err, "Rampart may not list widgets.unseen.example.com", "start the cluster with rampart up --custom-resource-groups unseen.example.com")
	if strings.Contains(err.Error(), "chart") {
		t.Errorf("on a local cluster the denial names the chart: %v", err)
	}
	// Unprotected, it goes.
	if _, err := crds.Patch(ctx, crd.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"rampart.io/protection":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unprotected CRD to be deletable", func(ctx context.Context) (bool, error) {
		err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	})
}
