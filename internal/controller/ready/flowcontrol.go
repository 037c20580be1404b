package ready

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
)

// FlowControls are Ready once the webhook configuration holds their
// webhooks as their current spec makes them, so a user sees from when
// they count.
var FlowControls = Kind[v1alpha1.DeletionFlowControl]{
	Owner: func(f *v1alpha1.DeletionFlowControl) rampartadmission.Owner {
		return rampartadmission.FlowControlOwner(f.Name)
	},
	Alone: func(reg *rampartadmission.Registration, f *v1alpha1.DeletionFlowControl) {
		reg.FlowControls = []v1alpha1.DeletionFlowControl{*f}
	},
	Status: func(f *v1alpha1.DeletionFlowControl) (*[]metav1.Condition, *int64) {
		return &f.Status.Conditions, &f.Status.ObservedGeneration
	},
	Reason: "Counting",
	Detail: ": deletes are counted",
}
