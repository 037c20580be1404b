package admission_test

import (
	"context"

	"os/exec"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

var explicit = map[string]string{"rampart.io/explicit-replicas": "true"}

func replicasOf(t *testing.T, env *clustertest.Env, ns, name string) int32 {
	t.Helper()
	d, err := env.Client.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *d.Spec.Replicas
}

func TestExplicitReplicas(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	deploys := env.Client.AppsV1().Deployments(ns)
	if _, err := deploys.Create(ctx, newDeployment("web", 3, explicit), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := func(body string) error {
		_, err := deploys.Patch(ctx, "web", types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}

	t.Run("a replica change without confirmation is denied", func(t *testing.T) {
		mustForbid(t, patch(`{"spec":{"replicas":0}}`), "from 3 to 0", `rampart.io/confirm-replicas="0"`,
			"kubectl rampart scale -n "+ns+" deployments.apps/web --replicas 0")
		if got := replicasOf(t, env, ns, "web"); got != 3 {
			t.Fatalf("replicas = %d after a denied change", got)
		}
	})
	t.Run("a wrong confirmation is denied", func(t *testing.T) {
		mustForbid(t, patch(`{"metadata":{"annotations":{"rampart.io/confirm-replicas":"3"}},"spec":{"replicas":30}}`), "not the new count 30")
	})
	t.Run("server-side apply is judged too", func(t *testing.T) {
		apply := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":1}}`
		_, err := deploys.Patch(ctx, "web", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "ci", Force: ptr.To(true)})
		mustForbid(t, err, "from 3 to 1")
	})
	t.Run("removing the label in the same write does not escape it", func(t *testing.T) {
		mustForbid(t, patch(`{"metadata":{"labels":{"rampart.io/explicit-replicas":null}},"spec":{"replicas":0}}`), "from 3 to 0")
	})
	t.Run("other changes pass", func(t *testing.T) {
		if err := patch(`{"metadata":{"labels":{"team":"shop"}}}`); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("kubectl scale goes through the scale subresource and is denied", func(t *testing.T) {
		// The scale webhook names its targets; it follows the label within
		// a moment of the workload's creation.
		waitScaleTarget(t, env, "apps/deployments/"+ns+"/web")
		// The API server picks the configuration up through a watch.
		var out string
		eventually(t, "kubectl scale to be denied", func(context.Context) (bool, error) {
			var err error
			out, err = env.Kubectl(t, "scale", "-n", ns, "deployment/web", "--replicas=0")
			return err != nil && strings.Contains(out, "scale subresource"), nil
		})
		if !strings.Contains(out, "kubectl rampart scale -n "+ns+" deployments.apps/web --replicas 0") {
			t.Errorf("kubectl scale denial does not give the command that works:\n%s", out)
		}
		if got := replicasOf(t, env, ns, "web"); got != 3 {
			t.Fatalf("replicas = %d after a denied kubectl scale", got)
		}
	})
	t.Run("rampart scale makes the confirmed change", func(t *testing.T) {
		_, rampart, err := clustertest.Binaries()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(rampart, "scale", "--kubeconfig", env.Kubeconfig, "-n", ns, "deployments.apps/web", "--replicas", "1").CombinedOutput()
		if err != nil {
			t.Fatalf("rampart scale: %v\n%s", err, out)
		}
		if got := replicasOf(t, env, ns, "web"); got != 1 {
			t.Fatalf("replicas = %d after rampart scale --replicas 1", got)
		}
		// The short kind works as with kubectl, and --dry-run changes nothing.
		out, err = exec.Command(rampart, "scale", "--kubeconfig", env.Kubeconfig, "-n", ns, "deploy/web", "--replicas", "4", "--dry-run").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "dry run") {
			t.Fatalf("rampart scale --dry-run: %v\n%s", err, out)
		}
		if got := replicasOf(t, env, ns, "web"); got != 1 {
			t.Fatalf("replicas = %d after a dry run", got)
		}
	})
	t.Run("an exempt requester scales freely", func(t *testing.T) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "autoscaler-bot", Groups: []string{"system:masters"}}
		bot := kubernetes.NewForConfigOrDie(cfg)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			scale, err := bot.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			scale.Spec.Replicas = 5
			_, err = bot.AppsV1().Deployments(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("exempt autoscaler-bot was denied: %v", err)
		}
	})
}

func TestUnlabelledWorkloadsScaleFreely(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment("plain", 2, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(t, "scale", "-n", ns, "deployment/plain", "--replicas=0"); err != nil {
		t.Fatalf("kubectl scale of an unlabelled deployment: %v\n%s", err, out)
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Patch(ctx, "plain", types.MergePatchType, []byte(`{"spec":{"replicas":7}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func webhookNamed(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, name string) *admissionregistrationv1.ValidatingWebhook {
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == name {
			return &cfg.Webhooks[i]
		}
	}
	return nil
}

// A custom resource with a scale subresource is a workload like any other:
// its replicas are explicit, through its own writes and through its scale
// subresource, and a Cascading one with replicas cannot be deleted.
func TestCustomWorkloadWithScaleSubresource(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ext := apiextensionsclient.NewForConfigOrDie(env.Config)
	crd := widgetCRD("gizmos.scale.example.com", nil)
	crd.Spec.Names.Kind, crd.Spec.Names.ListKind, crd.Spec.Names.Singular = "Gizmo", "GizmoList", "gizmo"
	crd.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{
		SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas",
	}}
	grantCustomResources(t, env, "scale.example.com")
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "scale.example.com", Version: "v1", Resource: "gizmos"}
	ns := env.Namespace(t)
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scale.example.com/v1", "kind": "Gizmo",
		"metadata": map[string]any{"name": "g", "labels": map[string]any{
			"rampart.io/explicit-replicas": "true", "rampart.io/protection": "Cascading"}},
		"spec": map[string]any{"replicas": int64(3)},
	}}
	eventually(t, "the CRD to serve", func(ctx context.Context) (bool, error) {
		_, err := env.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, g, metav1.CreateOptions{})
		return err == nil, nil
	})
	gizmos := env.Dynamic.Resource(gvr).Namespace(ns)
	_, err := gizmos.Patch(ctx, "g", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	mustForbid(t, err, `gizmos.scale.example.com "g"`, "from 3 to 0")
	waitScaleTarget(t, env, "scale.example.com/gizmos/"+ns+"/g")
	eventually(t, "kubectl scale of the custom resource to be denied", func(context.Context) (bool, error) {
		out, err := env.Kubectl(t, "scale", "-n", ns, "gizmos.scale.example.com/g", "--replicas=0")
		return err != nil && strings.Contains(out, "scale subresource"), nil
	})
	eventually(t, "the Cascading custom workload to refuse deletion", func(ctx context.Context) (bool, error) {
		err := gizmos.Delete(ctx, "g", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "3 desired replicas"), nil
	})

	// A Cascading namespace holding a custom workload with replicas (and no
	// pods yet) is not empty.
	held := uniqueName("gizmos")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: held, Labels: map[string]string{
		"rampart.io/protection": "Cascading", "gizmo-tier": "critical"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := g.DeepCopy()
	p.SetName("p")
	p.SetLabels(nil)
	if _, err := env.Dynamic.Resource(gvr).Namespace(held).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the custom workload to hold its namespace", func(ctx context.Context) (bool, error) {
		err := env.Client.CoreV1().Namespaces().Delete(ctx, held, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "1 workloads with replicas > 0 (gizmos.scale.example.com/p)"), nil
	})

	// A policy guards the replicas of custom workloads it selects, through
	// their scale subresource too.
	if err := applyPolicy(t, env, `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: critical-gizmos}
spec:
  resources: [{apiGroups: [scale.example.com], resources: [gizmos]}]
  namespaceSelector: {matchLabels: {gizmo-tier: critical}}
  explicitReplicas: {guard: ToZero}`); err != nil {
		t.Fatal(err)
	}
	waitPolicyReady(t, env, "critical-gizmos")
	waitScaleTarget(t, env, "scale.example.com/gizmos/"+held+"/p")
	eventually(t, "kubectl scale to 0 of the policy-guarded custom workload to be denied", func(context.Context) (bool, error) {
		out, err := env.Kubectl(t, "scale", "-n", held, "gizmos.scale.example.com/p", "--replicas=0")
		return err != nil && strings.Contains(out, `ProtectionPolicy "critical-gizmos"`), nil
	})
	if out, err := env.Kubectl(t, "scale", "-n", held, "gizmos.scale.example.com/p", "--replicas=1"); err != nil {
		t.Fatalf("guard ToZero must let 3 -> 1 through: %v\n%s", err, out)
	}
}

// waitScaleTarget waits until the scale webhook names the workload.
func waitScaleTarget(t *testing.T, env *clustertest.Env, target string) {
	t.Helper()
	eventually(t, "the scale webhook to name "+target, func(ctx context.Context) (bool, error) {
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, rampartadmission.ValidatingConfigName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		scale := webhookNamed(cfg, "scale.rampart.io")
		return scale != nil && len(scale.MatchConditions) == 1 && strings.Contains(scale.MatchConditions[0].Expression, `"`+target+`"`), nil
	})
}
