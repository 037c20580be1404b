package admit

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/ready"
)

// readiness: DeletionFlowControls are Ready once the webhook
// configuration holds their webhooks as their current spec makes them,
// so a user sees from when they count.
var readiness = ready.Kind[v1alpha1.DeletionFlowControl]{
	Status: func(f *v1alpha1.DeletionFlowControl) (*[]metav1.Condition, *int64) {
		return &f.Status.Conditions, &f.Status.ObservedGeneration
	},
	Reason: "Counting",
	Detail: ": deletes are counted",
}

// Ready is the controller of the flow controls' Ready condition.
func (*Plugin) Ready(c client.Client, reg func() rampartadmission.Registration) rampartadmission.Controller {
	return ready.New(c, reg, readiness)
}
