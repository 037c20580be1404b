// Package flowcontrolstatus keeps each DeletionFlowControl's Ready
// condition: True once the webhook configuration holds its webhook as its
// current spec makes it, so a user sees from when it counts.
package flowcontrolstatus

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/controller/ready"
)

// Reconciler sets the Ready condition of DeletionFlowControls.
type Reconciler struct {
	Client client.Client
	// Registration is the endpoint and CA part of what is registered.
	Registration func() rampartadmission.Registration
}

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	f := &v1alpha1.DeletionFlowControl{}
	if err := r.Client.Get(ctx, req.NamespacedName, f); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	reg := r.Registration()
	reg = reg.With(f)
	cond, err := ready.Condition(ctx, r.Client, reg, rampartadmission.FlowControlOwner(f.Name), f.Generation, "Counting", ": deletes are counted")
	if err != nil {
		return reconcile.Result{}, err
	}
	return ready.Apply(ctx, r.Client, f, &f.Status.Conditions, &f.Status.ObservedGeneration, f.Status.DeepCopy(), &f.Status, cond, 0)
}

// SetupWithManager runs the reconciler on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ready.Controller(mgr, "deletionflowcontrol-status", &v1alpha1.DeletionFlowControl{}, &v1alpha1.DeletionFlowControlList{}, r)
}
