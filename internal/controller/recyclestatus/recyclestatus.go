// Package recyclestatus keeps each RecyclePolicy's Ready condition: True
// once the webhook configuration holds its webhook as its current spec
// makes it, so a user sees from when its deletes are kept; False, saying
// why, while the recycle bin is off.
package recyclestatus

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/controller/ready"
	"github.com/rampart-io/rampart/internal/installation"
)

// Reconciler sets the Ready condition of RecyclePolicies.
type Reconciler struct {
	Client client.Client
	// Registration is the endpoint and CA part of what is registered, and
	// whether the recycle bin is on.
	Registration func() rampartadmission.Registration
	// InstalledBy is how the manager was installed: a policy's message
	// names how to turn the recycle bin on there.
	InstalledBy installation.Method
}

// turnOn is how to turn the recycle bin on.
var turnOn = installation.Setting{
	Helm:   "set the chart's manager.recycleBin.enabled",
	Up:     "start the cluster with rampart up, which keeps it in DIR/recycle-bin",
	ByHand: "run the manager with --recycle-bin-dir or --recycle-bin-store",
}

// RecycleBinOff is the reason of a policy nothing keeps for.
const RecycleBinOff = "RecycleBinOff"

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := &v1alpha1.RecyclePolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	reg := r.Registration()
	reg = reg.With(p)
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, ObservedGeneration: p.Generation, Reason: RecycleBinOff,
		Message: "the recycle bin is off, so nothing is kept: " + r.InstalledBy.Say(turnOn)}
	if reg.RecycleBin {
		var err error
		if cond, err = ready.Condition(ctx, r.Client, reg, rampartadmission.RecycleOwner(p.Name), p.Generation, "Keeping",
			": each delete it selects is refused unless a copy is stored first"); err != nil {
			return reconcile.Result{}, err
		}
	}
	return ready.Apply(ctx, r.Client, p, &p.Status.Conditions, &p.Status.ObservedGeneration, p.Status.DeepCopy(), &p.Status, cond, 0)
}

// SetupWithManager runs the reconciler on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ready.Controller(mgr, "recyclepolicy-status", &v1alpha1.RecyclePolicy{}, &v1alpha1.RecyclePolicyList{}, r)
}
