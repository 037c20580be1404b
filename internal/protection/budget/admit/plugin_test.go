package admit

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Budgets: disruptions and evictions of pods are judged only in namespaces
// holding budgets, every pod there whatever its labels.
func TestBudgetWebhooksReachOnlyBudgetedPods(t *testing.T) {
	reg := rampartadmission.Registration{Protections: []rampartadmission.Protection{&Plugin{}}, Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}
	for _, h := range rampartadmission.ValidatingConfig(reg).Webhooks {
		if strings.HasSuffix(h.Name, "budgets.rampart.io") {
			t.Fatalf("without budgets, webhook %s", h.Name)
		}
	}
	reg = reg.WithKeys(NamespaceKeys, "shop")
	cfg := rampartadmission.ValidatingConfig(reg)
	var pub, evict *admissionregistrationv1.ValidatingWebhook
	for i := range cfg.Webhooks {
		switch cfg.Webhooks[i].Name {
		case "budgets.rampart.io":
			pub = &cfg.Webhooks[i]
		case "evictions.budgets.rampart.io":
			evict = &cfg.Webhooks[i]
		}
	}
	if pub == nil || evict == nil {
		t.Fatalf("webhooks %v", cfg.Webhooks)
	}
	sel, _ := metav1.LabelSelectorAsSelector(pub.ObjectSelector)
	if !sel.Matches(labels.Set{"app": "web"}) || !sel.Matches(labels.Set{}) {
		t.Errorf("budget webhook object selector %v", sel)
	}
	for _, h := range []*admissionregistrationv1.ValidatingWebhook{pub, evict} {
		nsSel, _ := metav1.LabelSelectorAsSelector(h.NamespaceSelector)
		if nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "other"}) || !nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": "shop"}) {
			t.Errorf("%s namespace selector %v", h.Name, nsSel)
		}
	}
}
