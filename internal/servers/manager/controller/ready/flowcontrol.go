package ready

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// FlowControls are Ready once the webhook configuration holds their
// webhooks as their current spec makes them, so a user sees from when
// they count.
var FlowControls = Kind[v1alpha1.DeletionFlowControl]{
	Status: func(f *v1alpha1.DeletionFlowControl) (*[]metav1.Condition, *int64) {
		return &f.Status.Conditions, &f.Status.ObservedGeneration
	},
	Reason: "Counting",
	Detail: ": deletes are counted",
}
