package admit_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
	labelsplugin "github.com/rampart-io/rampart/internal/protection/labels/admit"
	objects "github.com/rampart-io/rampart/internal/protection/objects/admit"
	probe "github.com/rampart-io/rampart/internal/protection/probe/admit"
	scale "github.com/rampart-io/rampart/internal/protection/scale/admit"
)

func TestValidatingConfigReachesOnlyProtectedObjects(t *testing.T) {
	cfg := rampartadmission.ValidatingConfig(rampartadmission.Registration{Protections: builtin(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 9443}, CABundle: []byte("ca"), OwnNamespace: "rampart-system"})
	wh := cfg.Webhooks[0]
	sel, err := metav1.LabelSelectorAsSelector(wh.ObjectSelector)
	if err != nil {
		t.Fatal(err)
	}
	for lbls, want := range map[string]bool{
		"rampart.io/protection=Always":    true,
		"rampart.io/protection=Cascading": true,
		"rampart.io/protection=never":     false,
		"app=web":                         false,
		"":                                false,
	} {
		set, _ := labels.ConvertSelectorToLabelsMap(lbls)
		if got := sel.Matches(set); got != want {
			t.Errorf("object labels %q reach the webhook: %v, want %v", lbls, got, want)
		}
	}
	nsSel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	if nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "rampart-system"}) {
		t.Error("Rampart's own namespace reaches its webhook: an outage could lock Rampart out of repairing itself")
	}
	if !nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "prod"}) {
		t.Error("an ordinary namespace does not reach the webhook")
	}
	for _, r := range wh.Rules {
		if len(r.Operations) != 1 || r.Operations[0] != admissionregistrationv1.Delete {
			t.Errorf("rule %v covers %v, want DELETE only", r.Resources, r.Operations)
		}
	}
	if len(cfg.Webhooks) != 5 {
		t.Errorf("%d webhooks without scale targets, policies or budgets, want deletion, replicas (update and create), changewindows and spec", len(cfg.Webhooks))
	}
	if *wh.FailurePolicy != admissionregistrationv1.Fail {
		t.Error("protected objects must fail closed")
	}
	if *wh.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
		t.Error("the webhook writes Events, but none on dry run: NoneOnDryRun")
	}
	if got := *wh.ClientConfig.URL; got != "https://127.0.0.1:9443"+rampartadmission.DeletionPath {
		t.Errorf("local URL = %s", got)
	}
}

func TestValidatingConfigInClusterUsesTheService(t *testing.T) {
	cfg := rampartadmission.ValidatingConfig(rampartadmission.Registration{Protections: builtin(), Endpoint: rampartadmission.Endpoint{Service: "rampart-webhook", Namespace: "rampart-system"}, CABundle: []byte("ca"), OwnNamespace: "rampart-system"})
	cc := cfg.Webhooks[0].ClientConfig
	if cc.URL != nil {
		t.Fatalf("in-cluster registration uses URL %s, want a Service reference", *cc.URL)
	}
	if cc.Service == nil || cc.Service.Name != "rampart-webhook" || cc.Service.Namespace != "rampart-system" || *cc.Service.Path != rampartadmission.DeletionPath {
		t.Fatalf("service reference = %+v", cc.Service)
	}
}

// With the label rules compiled, the label webhook leaves to the compiled
// policies only the custom resources' writes it would admit: confirmed
// replica changes of an object that carried the label. Its match
// conditions are evaluated here with the API server's own CEL libraries
// (as a policy's, which they share): every other write still calls it.
func TestLabelWebhookLeavesOnlyConfirmedCustomResourceWrites(t *testing.T) {
	reg := rampartadmission.Registration{Protections: builtin(), CompiledLabels: true, OwnNamespace: "rampart-system", Scaled: []compiled.ScaledResource{compiledtest.Widgets}}
	var upd *admissionregistrationv1.ValidatingWebhook
	for _, w := range (&labelsplugin.Plugin{}).Webhooks(reg, rampartadmission.NewBuilder(reg)) {
		if w.Name == "replicas.rampart.io" {
			upd = &w.ValidatingWebhook
		}
	}
	if upd == nil {
		t.Fatal("no replicas.rampart.io webhook")
	}
	// A policy that denies whenever the webhook's conditions would call it.
	calls := compiled.LabelRules(compiled.Options{})[:1]
	calls[0].Policy = calls[0].Policy.DeepCopy()
	calls[0].Policy.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{}
	calls[0].Policy.Spec.MatchConstraints.ResourceRules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	calls[0].Policy.Spec.MatchConditions = upd.MatchConditions
	calls[0].Policy.Spec.Variables = nil
	calls[0].Policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false", Message: "calls the webhook", Reason: ptr.To(metav1.StatusReasonForbidden)}}
	explicit := map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
	deployments := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tt := range []struct {
		name            string
		gr              schema.GroupResource
		oldLabels       map[string]string
		from, to        any
		confirm         string
		callsTheWebhook bool
	}{
		{"a confirmed change of a labelled custom resource", compiledtest.Widgets.Resource, explicit, int64(3), int64(0), "0", false},
		{"an unconfirmed change", compiledtest.Widgets.Resource, explicit, int64(3), int64(0), "", true},
		{"a confirmation of another count", compiledtest.Widgets.Resource, explicit, int64(3), int64(0), "3", true},
		{"a confirmed change of an object gaining the label (its scale subresource is put in force)", compiledtest.Widgets.Resource, nil, int64(3), int64(0), "0", true},
		{"no size after the write reads as 1", compiledtest.Widgets.Resource, explicit, int64(3), nil, "1", false},
		{"a confirmed change of a built-in workload (compiled, never called)", deployments, explicit, int64(3), int64(0), "0", false},
		{"a built-in workload gaining the label", deployments, nil, int64(3), int64(0), "0", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := compiledtest.For(t, admission.Update, tt.gr, "lab", "w", "alice")
			var ann map[string]string
			if tt.confirm != "" {
				ann = map[string]string{v1alpha1.AnnotationConfirmReplicas: tt.confirm}
			}
			path := compiledtest.ReplicasPath(tt.gr)
			req.Old = compiledtest.ObjectAt(req.GVK, path, "lab", "w", tt.oldLabels, tt.from, nil)
			req.Obj = compiledtest.ObjectAt(req.GVK, path, "lab", "w", explicit, tt.to, ann)
			got := compiledtest.InNamespace(t, "lab").Admit(t, calls, req.Attributes())
			if got.Denied != tt.callsTheWebhook {
				t.Errorf("calls the webhook: %v, want %v", got.Denied, tt.callsTheWebhook)
			}
		})
	}
}

// builtin are the label, objects, scale and probe protections, in
// protections.All's order.
func builtin() []rampartadmission.Protection {
	return []rampartadmission.Protection{&labelsplugin.Plugin{}, &objects.Plugin{}, &scale.Plugin{}, &probe.Plugin{}}
}
