// Package windowstatus keeps each ChangeWindow's status: open or not, the
// next opening and closing, and Ready once its webhook is registered. It
// requeues itself at the next transition.
package windowstatus

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/changewindow"
	"github.com/rampart-io/rampart/internal/controller/ready"
)

// Reconciler keeps ChangeWindows' status.
type Reconciler struct {
	Client client.Client
	// Registration is the endpoint and CA part of what is registered.
	Registration func() rampartadmission.Registration
	Now          func() time.Time
}

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1alpha1.ChangeWindow{}
	if err := r.Client.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	before := cw.Status.DeepCopy()
	requeue := time.Hour
	var cond metav1.Condition
	w, err := changewindow.Compile(cw.Spec, now)
	if err != nil {
		cond = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Invalid", ObservedGeneration: cw.Generation, Message: err.Error()}
	} else {
		cw.Status.Open, _ = w.Open(now)
		nextOpen, nextClose := w.Next(now)
		cw.Status.NextOpen, cw.Status.NextClose = metaTime(nextOpen), metaTime(nextClose)
		for _, t := range []*time.Time{nextOpen, nextClose} {
			if t != nil && t.Sub(now) < requeue {
				requeue = t.Sub(now) + time.Second
			}
		}
		reg := r.Registration()
		reg = reg.With(cw)
		if cond, err = ready.Condition(ctx, r.Client, reg, rampartadmission.WindowOwner(cw.Namespace, cw.Name), cw.Generation, "Enforced", ""); err != nil {
			return reconcile.Result{}, err
		}
	}
	return ready.Apply(ctx, r.Client, cw, &cw.Status.Conditions, &cw.Status.ObservedGeneration, before, &cw.Status, cond, requeue)
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(*t)
	return &m
}

// SetupWithManager runs the reconciler on the leader.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ready.Controller(mgr, "changewindow-status", &v1alpha1.ChangeWindow{}, &v1alpha1.ChangeWindowList{}, r)
}
