package admission_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/localcluster"
	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/replicas"
	"github.com/rampart-io/rampart/internal/registrar"
)

// A custom resource whose CRD has a scale subresource at a path of its own
// (.spec.size) keeps explicit replicas with every manager stopped: the
// manager compiled the label rule for its CRD, so the API server refuses
// an unconfirmed change of the size itself, with the webhook's message,
// admits a confirmed one, and leaves an unlabelled custom resource alone.
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

	// The probe's record says when every API server enforces the CRD's
	// compiled policy; the label webhook then leaves the confirmed changes
	// to it, in a configuration every API server has loaded (the barrier
	// needs the manager's probe webhook: before stopping it).
	start := time.Now()
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
	barrier := rampartadmission.Barrier{Namespace: localcluster.ManagerNamespace,
		Servers: func(context.Context) ([]kubernetes.Interface, error) { return []kubernetes.Interface{env.Client}, nil }}
	if err := barrier.Wait(ctx, token); err != nil {
		t.Fatal(err)
	}
	t.Logf("compiled policy %s in force %v after the custom resources were made", compiledName, time.Since(start).Round(time.Millisecond))
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
	got, err := sizers.Get(ctx, "key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 5 {
		t.Errorf("the labelled custom resource's size is %d, want 5 (the confirmed change)", size)
	}
}
