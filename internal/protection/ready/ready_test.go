package ready_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready/readytest"
)

// Another object's webhooks never count for this one, whatever their
// names: a policy named "web" does not own "web.x"'s webhooks.
func TestOwnedWebhooksAreLookedUpByOwnerNotName(t *testing.T) {
	rules := []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}
	reg := rampartadmission.Registration{Protections: readytest.Registration().Protections, Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}.With(
		&v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, Protection: v1alpha1.ProtectionAlways}},
		&v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web.x"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, Protection: v1alpha1.ProtectionAlways}},
	)
	got := rampartadmission.OwnedWebhooks(reg, rampartadmission.PolicyOwner("web"))
	if len(got) != 1 || got[0].Name != "web.deletion.policy.rampart.io" {
		t.Fatalf("owned by policy web: %v", got)
	}
}
