package ready

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

func TestDecideFollowsEveryOwnedWebhook(t *testing.T) {
	reg := rampartadmission.Registration{Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1,
		Replicas: []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}}, OwnNamespace: "rampart-system"}
	reg = reg.With(&v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Spec: v1alpha1.DeletionFlowControlSpec{Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}}}})
	want := rampartadmission.OwnedWebhooks(reg, rampartadmission.FlowControlOwner("pods"))
	if len(want) != 2 || want[0].Name != "r0.pods.flowcontrol.rampart.io" || want[1].Name != "r1.pods.flowcontrol.rampart.io" {
		t.Fatalf("owned webhooks %v, want the flow control's, once per replica", want)
	}
	live := rampartadmission.ValidatingConfig(reg).Webhooks

	c := Decide(live, want, 3, "Counting", ": deletes are counted")
	if c.Status != metav1.ConditionTrue || c.Reason != "Counting" || c.ObservedGeneration != 3 ||
		c.Message != "webhooks r0.pods.flowcontrol.rampart.io, r1.pods.flowcontrol.rampart.io registered: deletes are counted" {
		t.Errorf("registered: %+v", c)
	}
	// One replica's copy missing, or registered with another reach: not yet.
	var missing []admissionregistrationv1.ValidatingWebhook
	for _, h := range live {
		if h.Name != want[1].Name {
			missing = append(missing, h)
		}
	}
	c = Decide(missing, want, 3, "Counting", "")
	if c.Status != metav1.ConditionFalse || c.Reason != Registering {
		t.Errorf("a copy missing: %+v", c)
	}
	stale := append([]admissionregistrationv1.ValidatingWebhook(nil), live...)
	for i := range stale {
		if stale[i].Name == want[1].Name {
			stale[i] = *stale[i].DeepCopy()
			stale[i].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"old": "spec"}}
		}
	}
	if c := Decide(stale, want, 3, "Counting", ""); c.Status != metav1.ConditionFalse {
		t.Errorf("a copy with the old spec's selector: %+v", c)
	}
}

// Another object's webhooks never count for this one, whatever their
// names: a policy named "web" does not own "web.x"'s webhooks.
func TestOwnedWebhooksAreLookedUpByOwnerNotName(t *testing.T) {
	rules := []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}
	reg := rampartadmission.Registration{Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}.With(
		&v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, Protection: v1alpha1.ProtectionAlways}},
		&v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web.x"}, Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, Protection: v1alpha1.ProtectionAlways}},
	)
	got := rampartadmission.OwnedWebhooks(reg, rampartadmission.PolicyOwner("web"))
	if len(got) != 1 || got[0].Name != "web.deletion.policy.rampart.io" {
		t.Fatalf("owned by policy web: %v", got)
	}
}
