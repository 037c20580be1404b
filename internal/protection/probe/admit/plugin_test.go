package admit_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	labelsplugin "github.com/rampart-io/rampart/internal/protection/labels/admit"
	objects "github.com/rampart-io/rampart/internal/protection/objects/admit"
	probe "github.com/rampart-io/rampart/internal/protection/probe/admit"
	scale "github.com/rampart-io/rampart/internal/protection/scale/admit"
)

// The probe reaches only dry-run creations of its own ConfigMap name in
// Rampart's namespace: it adds nothing an outage could block.
func TestProbeReachesOnlyItsOwnDryRun(t *testing.T) {
	reg := rampartadmission.Registration{Protections: builtin(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system", Token: "abc123"}
	var probe *admissionregistrationv1.ValidatingWebhook
	for i, h := range rampartadmission.ValidatingConfig(reg).Webhooks {
		if rampartadmission.IsProbe(h.Name) {
			probe = &rampartadmission.ValidatingConfig(reg).Webhooks[i]
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
	for _, h := range rampartadmission.ValidatingConfig(rampartadmission.Registration{Protections: builtin(), Endpoint: reg.Endpoint, OwnNamespace: "rampart-system"}).Webhooks {
		if rampartadmission.IsProbe(h.Name) {
			t.Error("a probe without a token")
		}
	}
}

// builtin are the label, objects, scale and probe protections, in
// protections.All's order.
func builtin() []rampartadmission.Protection {
	return []rampartadmission.Protection{&labelsplugin.Plugin{}, &objects.Plugin{}, &scale.Plugin{}, &probe.Plugin{}}
}
