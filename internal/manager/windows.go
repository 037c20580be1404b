package manager

import (
	"context"
	"slices"
	"strings"
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
	"github.com/rampart-io/rampart/internal/changewindow"
)

// listWindows lists every ChangeWindow from the cache, in a stable order.
func listWindows(ctx context.Context, reader client.Reader) ([]v1alpha1.ChangeWindow, error) {
	var list v1alpha1.ChangeWindowList
	if err := reader.List(ctx, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.ChangeWindow) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return list.Items, nil
}

// windowStatus keeps each ChangeWindow's status: open or not, the next
// opening and closing, and Ready once its webhook is registered. It
// requeues itself at the next transition.
type windowStatus struct {
	client client.Client
	reg    func() rampartadmission.Registration
	now    func() time.Time
}

func (r *windowStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cw := &v1alpha1.ChangeWindow{}
	if err := r.client.Get(ctx, req.NamespacedName, cw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := r.now()
	before := cw.DeepCopy()
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Enforced", ObservedGeneration: cw.Generation}
	requeue := time.Hour
	w, err := changewindow.Compile(cw.Spec, now)
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Invalid", err.Error()
	} else {
		cw.Status.Open, _ = w.Open(now)
		nextOpen, nextClose := w.Next(now)
		cw.Status.NextOpen, cw.Status.NextClose = metaTime(nextOpen), metaTime(nextClose)
		for _, t := range []*time.Time{nextOpen, nextClose} {
			if t != nil && t.Sub(now) < requeue {
				requeue = t.Sub(now) + time.Second
			}
		}
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		reg := r.reg()
		reg.Windows, reg.Policies, reg.ScaleTargets = []v1alpha1.ChangeWindow{*cw}, nil, nil
		name := cw.Name + "." + cw.Namespace + ".window.rampart.io"
		cond.Message = "webhook " + name + " registered"
		if !registeredAs(cfg, reg, name) {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Registering", "waiting for webhook "+name
			requeue = time.Second
		}
	}
	meta.SetStatusCondition(&cw.Status.Conditions, cond)
	cw.Status.ObservedGeneration = cw.Generation
	if !equality.Semantic.DeepEqual(before.Status, cw.Status) {
		if err := r.client.Status().Update(ctx, cw); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// registeredAs says whether cfg holds every copy of webhook name as reg
// makes it.
func registeredAs(cfg *admissionregistrationv1.ValidatingWebhookConfiguration, reg rampartadmission.Registration, name string) bool {
	for _, want := range rampartadmission.ValidatingConfig(reg).Webhooks {
		if rampartadmission.BaseName(want.Name) == name && !registered(cfg.Webhooks, want) {
			return false
		}
	}
	return true
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(*t)
	return &m
}

func (r *windowStatus) setup(mgr ctrl.Manager) error {
	return statusController(mgr, "changewindow-status", &v1alpha1.ChangeWindow{}, &v1alpha1.ChangeWindowList{}, r)
}
