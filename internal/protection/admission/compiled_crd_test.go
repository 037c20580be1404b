package admission_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/registrar"
	"github.com/rampart-io/rampart/internal/protection/replicas"
)

// A custom resource whose CRD has a scale subresource at a path of its own
// (.spec.size) keeps explicit replicas with every manager stopped: the
// manager compiled the label rule for its CRD, and a ProtectionPolicy's
// for the custom resources it covers, so the API server refuses an
// unconfirmed change of the size itself, with the webhook's message,
// admits a confirmed one, and leaves an unlabelled custom resource alone.
// Before that, the compiled policies follow a CRD added, changed and
// removed.
func TestCompiledCustomResourceReplicasHoldWithoutRampart(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{})
	ctx := context.Background()
	crd := widgetCRD("sizers.size.example.com", nil)
	crd.Spec.Names.Kind, crd.Spec.Names.ListKind, crd.Spec.Names.Singular = "Sizer", "SizerList", "sizer"
	crd.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{
		SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.size",
	}}
	grantCustomResources(t, env, "size.example.com")
	if _, err := apiextensionsclient.NewForConfigOrDie(env.Config).ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "size.example.com", Version: "v1", Resource: "sizers"}
	ns := env.Namespace(t)
	sizers := env.Dynamic.Resource(gvr).Namespace(ns)
	sizer := func(name string, labels map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "size.example.com/v1", "kind": "Sizer",
			"metadata": map[string]any{"name": name, "labels": labels},
			"spec":     map[string]any{"size": int64(3)},
		}}
	}
	eventually(t, "the CRD to serve", func(ctx context.Context) (bool, error) {
		_, err := sizers.Create(ctx, sizer("key", map[string]any{v1alpha1.LabelExplicitReplicas: "true"}), metav1.CreateOptions{})
		return err == nil, err
	})
	if _, err := sizers.Create(ctx, sizer("plain", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policyName := "sizers-" + ns
	// The custom resources labelled tier=fleet in the namespace may not
	// be scaled to 0 unconfirmed.
	if err := applyPolicy(t, env, fmt.Sprintf(`{apiVersion: rampart.io/v1alpha1, kind: ProtectionPolicy, metadata: {name: %s}, spec: {
  resources: [{apiGroups: [size.example.com], resources: [sizers]}], explicitReplicas: {guard: ToZero},
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}, objectSelector: {matchLabels: {tier: fleet}}}}`, policyName, ns)); err != nil {
		t.Fatal(err)
	}
	if _, err := sizers.Create(ctx, sizer("fleet", map[string]any{"tier": "fleet"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	policyCompiled := compiled.ScaledReplicasName(policyName, crd.Name)
	waitPolicyReadySaying(t, env, policyName, "also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy "+policyCompiled+")")
	keptInStep(t, env)

	// The probe's record says when every API server enforces the CRD's
	// compiled policy; the label webhook then leaves the confirmed changes
	// to it, in a configuration every API server has loaded (the barrier
	// needs the manager's probe webhook: before stopping it).
	compiledName := compiled.LabelScaledName(crd.Name)
	var token string
	eventually(t, "the compiled policy "+compiledName+" in force and the label webhook leaving confirmed changes to it", func(ctx context.Context) (bool, error) {
		probe, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, registrar.ProbePolicyName, metav1.GetOptions{})
		if err != nil || registrar.InForce(probe)[registrar.CRDKey(crd.Name)] == "" {
			return false, err
		}
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, rampartadmission.ValidatingConfigName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		upd := webhookNamed(cfg, "replicas.rampart.io")
		for _, c := range upd.MatchConditions {
			if c.Name == "not-confirmed" && strings.Contains(c.Expression, `"sizers"`) {
				token = registrar.Token(cfg)
				return true, nil
			}
		}
		return false, nil
	})
	// rampart export policies, from the cluster, compiles the same.
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	export, err := exec.Command(rampart, "export", "policies", "--kubeconfig", env.Kubeconfig).Output()
	if err != nil || !strings.Contains(string(export), "# Custom resources' replicas compiled for the CRDs: "+crd.Name+" (.spec.size).") ||
		!strings.Contains(string(export), "name: "+compiledName+"\n") || !strings.Contains(string(export), "name: "+policyCompiled+"\n") {
		t.Errorf("rampart export policies from the cluster: %v; want %s and %s compiled:\n%s", err, compiledName, policyCompiled, export)
	}
	barrier := rampartadmission.Barrier{Namespace: localcluster.ManagerNamespace,
		Servers: func(context.Context) ([]kubernetes.Interface, error) { return []kubernetes.Interface{env.Client}, nil }}
	if err := barrier.Wait(ctx, token); err != nil {
		t.Fatal(err)
	}
	if err := env.StopComponent("rampart-manager"); err != nil {
		t.Fatal(err)
	}

	want := replicas.Decide(replicas.Request{Object: protection.Object{Resource: gvr.GroupResource(), Namespace: ns, Name: "key"},
		Guard: v1alpha1.GuardAll, Old: 3, New: 0}).Message
	out, err := env.Kubectl(t, "patch", "-n", ns, "sizers.size.example.com/key", "--type=merge", "-p", `{"spec":{"size":0}}`)
	if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy '"+compiledName+"'") || !strings.Contains(out, want) {
		t.Errorf("with Rampart down, an unconfirmed change of the size: %v\n%s\nwant it refused by %s with the webhook's message %q", err, out, compiledName, want)
	}
	if out, err := env.Kubectl(t, "patch", "-n", ns, "sizers.size.example.com/key", "--type=merge", "-p",
		`{"metadata":{"annotations":{"rampart.io/confirm-replicas":"5"}},"spec":{"size":5}}`); err != nil {
		t.Errorf("with Rampart down, a confirmed change of the size was refused: %v\n%s", err, out)
	}
	if out, err := env.Kubectl(t, "patch", "-n", ns, "sizers.size.example.com/plain", "--type=merge", "-p", `{"spec":{"size":0}}`); err != nil {
		t.Errorf("with Rampart down, a change of an unlabelled custom resource was refused: %v\n%s", err, out)
	}
	// The policy's webhook fails closed; its compiled policy answers first.
	out, err = env.Kubectl(t, "patch", "-n", ns, "sizers.size.example.com/fleet", "--type=merge", "-p", `{"spec":{"size":0}}`)
	if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy '"+policyCompiled+"'") || !strings.Contains(out, "guard ToZero") ||
		!strings.Contains(out, "kubectl edit protectionpolicy "+policyName) {
		t.Errorf("with Rampart down, scaling a custom resource of ProtectionPolicy %s to 0: %v\n%s\nwant it refused by %s", policyName, err, out, policyCompiled)
	}
	got, err := sizers.Get(ctx, "key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 5 {
		t.Errorf("the labelled custom resource's size is %d, want 5 (the confirmed change)", size)
	}
}

// keptInStep: a CRD with a scale subresource added gets its compiled
// policy, a change of its replicas path recompiles it, and removing the
// CRD removes it.
func keptInStep(t *testing.T, env *clustertest.Env) {
	t.Helper()
	crds := apiextensionsclient.NewForConfigOrDie(env.Config).ApiextensionsV1().CustomResourceDefinitions()
	crd := widgetCRD("counters.size.example.com", nil)
	crd.Spec.Names.Kind, crd.Spec.Names.ListKind, crd.Spec.Names.Singular = "Counter", "CounterList", "counter"
	crd.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{
		SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas",
	}}
	ctx := context.Background()
	start := time.Now()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := compiled.LabelScaledName(crd.Name)
	reads := func(field string) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return len(p.Spec.Variables) > 0 && strings.Contains(p.Spec.MatchConditions[0].Expression, "has(object.spec."+field+")"), nil
		}
	}
	eventually(t, name+" compiled for the new CRD and in force", func(ctx context.Context) (bool, error) {
		probe, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, registrar.ProbePolicyName, metav1.GetOptions{})
		if err != nil || registrar.InForce(probe)[registrar.CRDKey(crd.Name)] == "" {
			return false, nil
		}
		return reads("replicas")(ctx)
	})
	t.Logf("%s compiled and in force on every API server %v after its CRD was created", name, time.Since(start).Round(time.Millisecond))
	if _, err := crds.Patch(ctx, crd.Name, types.JSONPatchType,
		[]byte(`[{"op":"replace","path":"/spec/versions/0/subresources/scale/specReplicasPath","value":".spec.count"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, name+" recompiled for the CRD's new path", reads("count"))
	if err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, name+" removed with its CRD", func(ctx context.Context) (bool, error) {
		_, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
