package admit_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	labelsplugin "github.com/rampart-io/rampart/internal/protection/labels/admit"
	objects "github.com/rampart-io/rampart/internal/protection/objects/admit"
	probe "github.com/rampart-io/rampart/internal/protection/probe/admit"
	scale "github.com/rampart-io/rampart/internal/protection/scale/admit"
)

func TestScaleWebhookNamesItsTargets(t *testing.T) {
	reg := rampartadmission.Registration{Protections: builtin(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}.
		WithKeys(rampartadmission.ScaleTargetKeys, "apps/deployments/shop/web")
	cfg := rampartadmission.ValidatingConfig(reg)
	last := len(cfg.Webhooks) - 1
	if len(cfg.Webhooks) != 6 || cfg.Webhooks[last].Name != "scale.rampart.io" {
		t.Fatalf("webhooks = %d, want a scale webhook", len(cfg.Webhooks))
	}
	mc := cfg.Webhooks[last].MatchConditions
	if len(mc) != 1 || !strings.Contains(mc[0].Expression, `"apps/deployments/shop/web"`) {
		t.Fatalf("match conditions = %+v", mc)
	}
	for i := range scale.MaxScaleTargets {
		reg = reg.WithKeys(rampartadmission.ScaleTargetKeys, fmt.Sprintf("apps/deployments/ns/w%d", i))
	}
	if mc := rampartadmission.ValidatingConfig(reg).Webhooks[last].MatchConditions; len(mc) != 0 {
		t.Fatal("past scale.MaxScaleTargets the condition must be dropped, not truncated: truncation would leave workloads unguarded")
	}
}

// A policy just admitted that guards replicas judges the scale subresource
// of its resources in its namespaces, and nothing else.
func TestScaleWideningCoversThePolicysResources(t *testing.T) {
	p := v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}},
	}}
	cfg := rampartadmission.ValidatingConfig(rampartadmission.Registration{Protections: builtin(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}.WithWidening(scale.Widening, rampartadmission.Widening{Object: &p}))
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

// builtin are the label, objects, scale and probe protections, in
// protections.All's order.
func builtin() []rampartadmission.Protection {
	return []rampartadmission.Protection{&labelsplugin.Plugin{}, &objects.Plugin{}, &scale.Plugin{}, &probe.Plugin{}}
}
