package admission

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestValidatingConfigReachesOnlyProtectedObjects(t *testing.T) {
	cfg := ValidatingConfig(Registration{Protections: builtin(), Endpoint: Endpoint{URLHost: "127.0.0.1", Port: 9443}, CABundle: []byte("ca"), OwnNamespace: "rampart-system"})
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
	if got := *wh.ClientConfig.URL; got != "https://127.0.0.1:9443"+DeletionPath {
		t.Errorf("local URL = %s", got)
	}
}

func TestValidatingConfigInClusterUsesTheService(t *testing.T) {
	cfg := ValidatingConfig(Registration{Protections: builtin(), Endpoint: Endpoint{Service: "rampart-webhook", Namespace: "rampart-system"}, CABundle: []byte("ca"), OwnNamespace: "rampart-system"})
	cc := cfg.Webhooks[0].ClientConfig
	if cc.URL != nil {
		t.Fatalf("in-cluster registration uses URL %s, want a Service reference", *cc.URL)
	}
	if cc.Service == nil || cc.Service.Name != "rampart-webhook" || cc.Service.Namespace != "rampart-system" || *cc.Service.Path != DeletionPath {
		t.Fatalf("service reference = %+v", cc.Service)
	}
}

func TestScaleWebhookNamesItsTargets(t *testing.T) {
	reg := Registration{Protections: builtin(), Endpoint: Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}.
		WithKeys(ScaleTargetKeys, "apps/deployments/shop/web")
	cfg := ValidatingConfig(reg)
	last := len(cfg.Webhooks) - 1
	if len(cfg.Webhooks) != 6 || cfg.Webhooks[last].Name != "scale.rampart.io" {
		t.Fatalf("webhooks = %d, want a scale webhook", len(cfg.Webhooks))
	}
	mc := cfg.Webhooks[last].MatchConditions
	if len(mc) != 1 || !strings.Contains(mc[0].Expression, `"apps/deployments/shop/web"`) {
		t.Fatalf("match conditions = %+v", mc)
	}
	for i := range maxScaleTargets {
		reg = reg.WithKeys(ScaleTargetKeys, fmt.Sprintf("apps/deployments/ns/w%d", i))
	}
	if mc := ValidatingConfig(reg).Webhooks[last].MatchConditions; len(mc) != 0 {
		t.Fatal("past maxScaleTargets the condition must be dropped, not truncated: truncation would leave workloads unguarded")
	}
}

// The probe reaches only dry-run creations of its own ConfigMap name in
// Rampart's namespace: it adds nothing an outage could block.
func TestProbeReachesOnlyItsOwnDryRun(t *testing.T) {
	reg := Registration{Protections: builtin(), Endpoint: Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system", Token: "abc123"}
	var probe *admissionregistrationv1.ValidatingWebhook
	for i, h := range ValidatingConfig(reg).Webhooks {
		if IsProbe(h.Name) {
			probe = &ValidatingConfig(reg).Webhooks[i]
		}
	}
	if probe == nil {
		t.Fatal("no probe webhook with a token")
	}
	if len(probe.Rules) != 1 || probe.Rules[0].Operations[0] != admissionregistrationv1.Create || probe.Rules[0].Resources[0] != "configmaps" {
		t.Errorf("probe rules %+v", probe.Rules)
	}
	nsSel, _ := metav1.LabelSelectorAsSelector(probe.NamespaceSelector)
	if !nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "rampart-system"}) || nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "prod"}) {
		t.Errorf("probe namespace selector %v", nsSel)
	}
	if len(probe.MatchConditions) != 1 || probe.MatchConditions[0].Expression != `request.dryRun == true && request.name == "rampart-probe-abc123"` {
		t.Errorf("probe match conditions %+v", probe.MatchConditions)
	}
	for _, h := range ValidatingConfig(Registration{Protections: builtin(), Endpoint: reg.Endpoint, OwnNamespace: "rampart-system"}).Webhooks {
		if IsProbe(h.Name) {
			t.Error("a probe without a token")
		}
	}
}

// A policy just admitted that guards replicas judges the scale subresource
// of its resources in its namespaces, and nothing else.
func TestScaleWideningCoversThePolicysResources(t *testing.T) {
	p := v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}},
	}}
	cfg := ValidatingConfig(Registration{Protections: builtin(), Endpoint: Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system",
		ScaleWidening: []v1alpha1.ProtectionPolicy{p}})
	for _, h := range cfg.Webhooks {
		if h.Name != "p.scale.policy.rampart.io" {
			continue
		}
		if len(h.Rules) != 1 || strings.Join(h.Rules[0].Resources, ",") != "deployments/scale,statefulsets/scale" {
			t.Errorf("rules %+v", h.Rules)
		}
		nsSel, _ := metav1.LabelSelectorAsSelector(h.NamespaceSelector)
		if !nsSel.Matches(labels.Set{"tier": "critical"}) || nsSel.Matches(labels.Set{"tier": "batch"}) {
			t.Errorf("namespace selector %v", nsSel)
		}
		return
	}
	t.Fatal("no scale widening webhook")
}

// builtin are the protections of this package, in protections.All's
// order (internal/protection/protections imports this package, so its
// tests here cannot).
func builtin() []Protection {
	return []Protection{&LabelsPlugin{}, &ObjectsPlugin{}, &ScalePlugin{}, &ProbePlugin{}}
}
