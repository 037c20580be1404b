package manager

import (
	"context"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
)

// flowControlStatus sets each DeletionFlowControl's Ready condition: True
// once the webhook configuration holds its webhook as its current spec
// makes it, so a user sees from when it counts.
type flowControlStatus struct {
	client client.Client
	reg    func() rampartadmission.Registration
}

func (r *flowControlStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	f := &v1alpha1.DeletionFlowControl{}
	if err := r.client.Get(ctx, req.NamespacedName, f); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	reg := r.reg()
	reg.FlowControls, reg.Policies, reg.Windows, reg.ScaleTargets = []v1alpha1.DeletionFlowControl{*f}, nil, nil, nil
	name := f.Name + ".flowcontrol.rampart.io"
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Counting", ObservedGeneration: f.Generation,
		Message: "webhook " + name + " registered: deletes are counted"}
	if !registeredAs(cfg, reg, name) {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Registering", "waiting for webhook "+name
	}
	before := f.DeepCopy()
	meta.SetStatusCondition(&f.Status.Conditions, cond)
	f.Status.ObservedGeneration = f.Generation
	if !equality.Semantic.DeepEqual(before.Status, f.Status) {
		// A counted delete may write the status meanwhile: a conflict
		// requeues.
		if err := r.client.Status().Update(ctx, f); err != nil {
			return reconcile.Result{}, err
		}
	}
	if cond.Status == metav1.ConditionFalse {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{}, nil
}

func (r *flowControlStatus) setup(mgr ctrl.Manager) error {
	return statusController(mgr, "deletionflowcontrol-status", &v1alpha1.DeletionFlowControl{}, &v1alpha1.DeletionFlowControlList{}, r)
}
