package admit

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready"
)

// readiness: NodeDisruptionBudgets are Ready once the webhook
// configuration holds their webhooks as their current spec makes them.
var readiness = ready.Kind[v1alpha1.NodeDisruptionBudget]{
	Status: func(b *v1alpha1.NodeDisruptionBudget) (*[]metav1.Condition, *int64) {
		return &b.Status.Conditions, &b.Status.ObservedGeneration
	},
	Reason: "Counting",
	Detail: ": departures of its nodes are counted",
}

// Ready is the controller of the node budgets' Ready condition.
func (*Plugin) Ready(c client.Client, reg func() rampartadmission.Registration) rampartadmission.Controller {
	return ready.New(c, reg, readiness)
}
