package admit

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// A policy's webhooks are its own: served under its prefixes followed by
// its name, and owned by it (so its Ready condition follows them).
func TestAPolicyOwnsItsWebhooks(t *testing.T) {
	p := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		Protection:        v1alpha1.ProtectionAlways,
		ExplicitReplicas:  &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardDecrease}}}
	reg := rampartadmission.Registration{Protections: []rampartadmission.Protection{&Plugin{}},
		Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}.With(p)
	want := map[string]string{
		"web.deletion.policy.rampart.io":   DeletionPrefix + "web",
		"web.replicas.policy.rampart.io":   ReplicasPrefix + "web",
		"web.namespaces.policy.rampart.io": ReplicasPrefix + "web",
	}
	got := rampartadmission.OwnedWebhooks(reg, Owner("web"))
	if len(got) != len(want) {
		t.Fatalf("webhooks %v, want %v", got, want)
	}
	for _, h := range rampartadmission.ValidatingConfig(reg).Webhooks {
		path, ok := want[h.Name]
		if !ok || h.ClientConfig.URL == nil || !strings.HasSuffix(*h.ClientConfig.URL, path) {
			t.Errorf("webhook %s at %v, want it at %s", h.Name, h.ClientConfig.URL, path)
		}
	}
}
