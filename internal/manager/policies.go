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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// cachedPolicies reads ProtectionPolicies from the manager's cache, and a
// policy the cache does not hold yet (its webhook called before the watch
// delivered it) from the API server.
type cachedPolicies struct{ reader, live client.Reader }

func (c cachedPolicies) Policy(ctx context.Context, name string) (*v1alpha1.ProtectionPolicy, bool, error) {
	p := &v1alpha1.ProtectionPolicy{}
	err := c.reader.Get(ctx, client.ObjectKey{Name: name}, p)
	if apierrors.IsNotFound(err) && c.live != nil {
		err = c.live.Get(ctx, client.ObjectKey{Name: name}, p)
	}
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return p, err == nil, err
}

// liveLabels reads a workload's labels from the API server (a list by
// name: the manager may list any resource, not get it).
func liveLabels(meta metadata.Interface) func(context.Context, schema.GroupVersionResource, string, string) (map[string]string, bool, error) {
	return func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error) {
		l, err := meta.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil || len(l.Items) == 0 {
			return nil, false, err
		}
		return l.Items[0].GetLabels(), true, nil
	}
}

// ListLive lists every policy from the API server.
func (c cachedPolicies) ListLive(ctx context.Context) ([]v1alpha1.ProtectionPolicy, error) {
	return cachedPolicies{reader: c.live}.List(ctx)
}

func (c cachedPolicies) List(ctx context.Context) ([]v1alpha1.ProtectionPolicy, error) {
	var list v1alpha1.ProtectionPolicyList
	if err := c.reader.List(ctx, &list); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.ProtectionPolicy) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// policyStatus sets each policy's Ready condition: True once the webhook
// configuration registered with the API server holds the policy's webhooks
// as its current spec makes them.
type policyStatus struct {
	client client.Client
	reg    func() rampartadmission.Registration
}

func (r *policyStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := &v1alpha1.ProtectionPolicy{}
	if err := r.client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err := r.client.Get(ctx, client.ObjectKey{Name: rampartadmission.ValidatingConfigName}, cfg)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	reg := r.reg()
	reg.Policies, reg.ScaleTargets = []v1alpha1.ProtectionPolicy{*p}, nil
	var want []admissionregistrationv1.ValidatingWebhook
	for _, w := range rampartadmission.ValidatingConfig(reg).Webhooks {
		if name := rampartadmission.BaseName(w.Name); strings.HasPrefix(name, p.Name+".") && strings.HasSuffix(name, ".policy.rampart.io") {
			want = append(want, w)
		}
	}
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Enforced", ObservedGeneration: p.Generation}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = w.Name
		if !registered(cfg.Webhooks, w) {
			cond.Status, cond.Reason = metav1.ConditionFalse, "Registering"
		}
	}
	mode := "enforced"
	if !policy.Enforced(p) {
		mode = "warning only"
	}
	cond.Message = "webhooks " + strings.Join(names, ", ") + " registered; " + mode
	if cond.Status == metav1.ConditionFalse {
		cond.Message = "waiting for the webhook configuration to include " + strings.Join(names, ", ")
	}
	before := p.DeepCopy()
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	p.Status.ObservedGeneration = p.Generation
	if !equality.Semantic.DeepEqual(before.Status, p.Status) {
		if err := r.client.Status().Update(ctx, p); err != nil {
			return reconcile.Result{}, err
		}
	}
	if cond.Status == metav1.ConditionFalse {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	return reconcile.Result{}, nil
}

// registered compares what decides the webhook's reach, not its endpoint.
func registered(have []admissionregistrationv1.ValidatingWebhook, want admissionregistrationv1.ValidatingWebhook) bool {
	for _, h := range have {
		if h.Name == want.Name {
			return equality.Semantic.DeepEqual(h.Rules, want.Rules) &&
				equality.Semantic.DeepEqual(h.NamespaceSelector, want.NamespaceSelector) &&
				equality.Semantic.DeepEqual(h.ObjectSelector, want.ObjectSelector) &&
				equality.Semantic.DeepEqual(h.FailurePolicy, want.FailurePolicy)
		}
	}
	return false
}

func (r *policyStatus) setup(mgr ctrl.Manager) error {
	return statusController(mgr, "protectionpolicy-status", &v1alpha1.ProtectionPolicy{}, &v1alpha1.ProtectionPolicyList{}, r)
}

// statusController runs r for each object of a kind whose webhook Rampart
// registers: on the object's changes, and for all of them when the webhook
// configuration changes (their Ready condition follows it).
func statusController(mgr ctrl.Manager, name string, obj client.Object, list client.ObjectList, r reconcile.Reconciler) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := mgr.GetClient().List(ctx, l); err != nil {
			return nil
		}
		var out []reconcile.Request
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			if m, err := meta.Accessor(o); err == nil {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}})
			}
			return nil
		})
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(obj).
		Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, all).
		Complete(r)
}
