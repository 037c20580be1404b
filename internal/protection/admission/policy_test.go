package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

var policies = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "protectionpolicies"}

func applyPolicy(t *testing.T, env *clustertest.Env, manifest string) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	_, err := env.Dynamic.Resource(policies).Create(context.Background(), u, metav1.CreateOptions{})
	if err == nil {
		t.Cleanup(func() {
			_ = env.Dynamic.Resource(policies).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
		})
	}
	return err
}

func TestMalformedPoliciesAreRejectedByTheAPI(t *testing.T) {
	env := clustertest.Get(t)
	for _, tt := range []struct{ name, manifest, want string }{
		{"no protection, explicitReplicas or explicitDeletion", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: nothing}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]`, "set protection, explicitReplicas or explicitDeletion"},
		{"explicitDeletion over no workload kind", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: cms}
spec:
  explicitDeletion: true
  resources: [{apiGroups: [""], resources: [configmaps]}]`, "list deployments, statefulsets, daemonsets or replicasets"},
		{"unknown protection", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: typo}
spec:
  protection: Allways
  resources: [{apiGroups: [apps], resources: [deployments]}]`, `Unsupported value: "Allways"`},
		{"no resources", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: empty}
spec:
  protection: Always
  resources: []`, "spec.resources"},
		{"a selector operator that does not exist", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: badsel}
spec:
  protection: Always
  resources: [{apiGroups: [""], resources: [configmaps]}]
  objectSelector: {matchExpressions: [{key: app, operator: Equals, values: [x]}]}`, "each matchExpression needs operator In or NotIn"},
		{"In without values", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: novalues}
spec:
  protection: Always
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchExpressions: [{key: tier, operator: In}]}`, "each matchExpression needs operator In or NotIn"},
		{"a subresource", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: sub}
spec:
  protection: Always
  resources: [{apiGroups: [apps], resources: [deployments/scale]}]`, "spec.resources[0].resources[0]"},
		{"an unknown guard", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: guard}
spec:
  explicitReplicas: {guard: Sometimes}
  resources: [{apiGroups: [apps], resources: [deployments]}]`, `Unsupported value: "Sometimes"`},
		{"a name too long for a webhook", `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: a-policy-name-that-is-far-too-long-to-become-part-of-a-webhook-name}
spec:
  protection: Always
  resources: [{apiGroups: [apps], resources: [deployments]}]`, "at most 63 characters"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := applyPolicy(t, env, tt.manifest)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want Invalid naming %q", err, tt.want)
			}
		})
	}
}

func waitPolicyReady(t *testing.T, env *clustertest.Env, name string) {
	t.Helper()
	waitPolicyReadySaying(t, env, name, "")
}

// waitPolicyReadySaying waits until the policy is Ready with a message
// that holds want.
func waitPolicyReadySaying(t *testing.T, env *clustertest.Env, name, want string) {
	t.Helper()
	eventually(t, fmt.Sprintf("policy %s Ready, saying %q", name, want), func(ctx context.Context) (bool, error) {
		u, err := env.Dynamic.Resource(policies).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "True" {
				msg, _ := m["message"].(string)
				return strings.Contains(msg, want), nil
			}
		}
		return false, nil
	})
}

func labelledNamespace(t *testing.T, env *clustertest.Env, labels map[string]string) string {
	t.Helper()
	ns := env.Namespace(t)
	patch := `{"metadata":{"labels":{`
	first := true
	for k, v := range labels {
		if !first {
			patch += ","
		}
		patch += `"` + k + `":"` + v + `"`
		first = false
	}
	patch += `}}}`
	if _, err := env.Client.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// A platform team protects every Deployment in namespaces labelled
// tier=critical without labelling one of them.
func TestProtectionPolicyBySelectors(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	err := applyPolicy(t, env, `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: critical-workloads}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  namespaceSelector: {matchLabels: {tier: critical}}
  objectSelector: {matchExpressions: [{key: canary, operator: DoesNotExist}]}
  protection: Cascading
  explicitReplicas: {guard: Decrease}
  exempt: {users: [release-bot]}`)
	if err != nil {
		t.Fatal(err)
	}
	waitPolicyReady(t, env, "critical-workloads")
	critical := labelledNamespace(t, env, map[string]string{"tier": "critical"})
	other := labelledNamespace(t, env, map[string]string{"tier": "batch"})
	for _, ns := range []string{critical, other} {
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment("web", 2, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Client.AppsV1().Deployments(critical).Create(ctx, newDeployment("canary", 1, map[string]string{"canary": "yes"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, critical, "app=web", 2, 30*time.Second)

	t.Run("delete in a critical namespace is denied, naming the policy", func(t *testing.T) {
		err := env.Client.AppsV1().Deployments(critical).Delete(ctx, "web", metav1.DeleteOptions{})
		mustForbid(t, err, `ProtectionPolicy "critical-workloads"`, "2 desired replicas", "kubectl edit protectionpolicy critical-workloads")
	})
	t.Run("the object selector excludes canaries", func(t *testing.T) {
		if err := env.Client.AppsV1().Deployments(critical).Delete(ctx, "canary", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a decrease without confirmation is denied; an increase passes (guard Decrease)", func(t *testing.T) {
		_, err := env.Client.AppsV1().Deployments(critical).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
		mustForbid(t, err, "from 2 to 1", "guard Decrease")
		if _, err := env.Client.AppsV1().Deployments(critical).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("increase: %v", err)
		}
	})
	t.Run("kubectl scale down is denied through the scale subresource", func(t *testing.T) {
		eventually(t, "kubectl scale down to be denied", func(context.Context) (bool, error) {
			out, err := env.Kubectl(t, "scale", "-n", critical, "deployment/web", "--replicas=3")
			return err != nil && strings.Contains(out, `ProtectionPolicy "critical-workloads"`), nil
		})
	})
	t.Run("the exempt user passes", func(t *testing.T) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "release-bot", Groups: []string{"system:masters"}}
		bot := kubernetes.NewForConfigOrDie(cfg)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			_, err := bot.AppsV1().Deployments(critical).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("exempt release-bot was denied: %v", err)
		}
	})
	t.Run("outside the selected namespaces nothing is guarded", func(t *testing.T) {
		if out, err := env.Kubectl(t, "scale", "-n", other, "deployment/web", "--replicas=0"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if err := env.Client.AppsV1().Deployments(other).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("deleting the policy lifts it", func(t *testing.T) {
		if err := env.Dynamic.Resource(policies).Delete(ctx, "critical-workloads", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the policy's webhooks to be unregistered", func(ctx context.Context) (bool, error) {
			cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, rampartadmission.ValidatingConfigName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, w := range cfg.Webhooks {
				if strings.HasPrefix(w.Name, "critical-workloads.") {
					return false, nil
				}
			}
			return true, nil
		})
	})
}

func TestWarnModePolicyWarnsAndAdmits(t *testing.T) {
	env := clustertest.Get(t)
	err := applyPolicy(t, env, `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: warn-configmaps}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  objectSelector: {matchLabels: {warn-test: "yes"}}
  protection: Always
  mode: Warn`)
	if err != nil {
		t.Fatal(err)
	}
	waitPolicyReady(t, env, "warn-configmaps")
	ns := env.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "soft", Labels: map[string]string{"warn-test": "yes"}}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := env.Kubectl(t, "delete", "-n", ns, "configmap/soft")
	if err != nil {
		t.Fatalf("a Warn-mode policy blocked a delete: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Warning: rampart (Warn mode)") || !strings.Contains(out, `ProtectionPolicy "warn-configmaps"`) {
		t.Fatalf("kubectl showed no warning naming the policy:\n%s", out)
	}
}

// A namespace holding an object that a policy protects is held by it, as
// by a labelled one.
func TestCascadingNamespaceHeldByPolicyProtectedObject(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	err := applyPolicy(t, env, `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: vault-configmaps}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  objectSelector: {matchLabels: {vault: "true"}}
  protection: Always`)
	if err != nil {
		t.Fatal(err)
	}
	waitPolicyReady(t, env, "vault-configmaps")
	ns := uniqueName("vault")
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: cascading}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "root-keys", Labels: map[string]string{"vault": "true"}}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the policy-protected ConfigMap to hold its namespace", func(ctx context.Context) (bool, error) {
		err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "1 protected objects (configmap/root-keys)"), err
	})
	// Lift it: the namespace can go.
	if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"rampart.io/protection":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
