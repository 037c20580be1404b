package admission

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestValidatingConfigReachesOnlyProtectedObjects(t *testing.T) {
	cfg := ValidatingConfig(Endpoint{URLHost: "127.0.0.1", Port: 9443}, []byte("ca"), "rampart-system")
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
	if *wh.FailurePolicy != admissionregistrationv1.Fail {
		t.Error("protected objects must fail closed")
	}
	if *wh.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
		t.Error("the webhook writes Events, but none on dry run: NoneOnDryRun")
	}
	if got := *wh.ClientConfig.URL; got != "https://127.0.0.1:9443"+DeletionPath {
		t.Errorf("local URL = %s", got)
	}
}

func TestValidatingConfigInClusterUsesTheService(t *testing.T) {
	cfg := ValidatingConfig(Endpoint{Service: "rampart-webhook", Namespace: "rampart-system"}, []byte("ca"), "rampart-system")
	cc := cfg.Webhooks[0].ClientConfig
	if cc.URL != nil {
		t.Fatalf("in-cluster registration uses URL %s, want a Service reference", *cc.URL)
	}
	if cc.Service == nil || cc.Service.Name != "rampart-webhook" || cc.Service.Namespace != "rampart-system" || *cc.Service.Path != DeletionPath {
		t.Fatalf("service reference = %+v", cc.Service)
	}
}
