// Package explicitdeletion labels rampart.io/explicit-deletion=true the
// running pods of the workloads that opt in: a workload labelled so itself
// (Deployment, StatefulSet, DaemonSet, ReplicaSet), or one an enforced
// ProtectionPolicy with explicitDeletion covers. The node guard then lets
// only an API delete end those pods. A pod is labelled once it runs, so a
// pod that never started can still be cleaned up by the kubelet at will.
package explicitdeletion

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/clusterview"
	"github.com/rampart-io/rampart/internal/protection/policy"
)

// The label is a patch of the pod.
// +kubebuilder:rbac:groups="",resources=pods,verbs=patch

// Workload is one workload in a pod's chain of controllers, nearest first.
type Workload struct {
	Kind, Name string
	Resource   schema.GroupResource
	Labels     map[string]string
}

// Decide says whether pod should be labelled now, and why: it runs, is not
// being deleted, is not labelled yet, and a workload of its chain opts in
// (labelled itself, or covered by an enforced policy with
// explicitDeletion; nsLabels are its namespace's labels).
func Decide(pod *corev1.Pod, chain []Workload, policies []v1alpha1.ProtectionPolicy, nsLabels map[string]string) (bool, string) {
	switch {
	case pod.Labels[v1alpha1.LabelExplicitDeletion] == "true":
		return false, "already labelled"
	case pod.DeletionTimestamp != nil:
		return false, "being deleted"
	case pod.Status.Phase != corev1.PodRunning:
		return false, "not running"
	}
	for _, w := range chain {
		if w.Labels[v1alpha1.LabelExplicitDeletion] == "true" {
			return true, fmt.Sprintf("%s %s is labelled %s=true", w.Kind, w.Name, v1alpha1.LabelExplicitDeletion)
		}
		for i := range policies {
			p := &policies[i]
			if p.Spec.ExplicitDeletion && policy.Enforced(p) && policy.Covers(p, w.Resource, nsLabels, w.Labels) {
				return true, fmt.Sprintf("ProtectionPolicy %s (explicitDeletion) covers %s %s", p.Name, w.Kind, w.Name)
			}
		}
	}
	return false, "no workload of its chain opts in"
}

// View is what the controller reads of the cluster (clusterview).
type View interface {
	Pod(ns, name string) (*corev1.Pod, bool)
	Pods(ns string) []*corev1.Pod
	AllPods() []*corev1.Pod
	Workload(kind, ns, name string) metav1.Object
	PodInformer() toolscache.SharedIndexInformer
	WorkloadInformer(gr schema.GroupResource) toolscache.SharedIndexInformer
}

// Reconciler labels one pod.
type Reconciler struct {
	// Client writes the label; Reader lists ProtectionPolicies (cached).
	Client     client.Client
	Reader     client.Reader
	View       View
	Namespaces interface {
		NamespaceLabels(ns string) (map[string]string, bool)
	}
}

// SetupWithManager runs the controller on the leader, fed by the cluster
// view's informers: a pod that changes (starts running), a workload that
// gains the label, and any ProtectionPolicy change.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named("explicit-deletion").
		WatchesRawSource(&source.Informer{Informer: r.View.PodInformer(), Handler: handler.Funcs{
			CreateFunc: func(_ context.Context, e handlerEvent, q queue) { addPod(q, e.Object) },
			UpdateFunc: func(_ context.Context, e handlerUpdate, q queue) { addPod(q, e.ObjectNew) },
		}}).
		Watches(&v1alpha1.ProtectionPolicy{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return candidates(r.View.AllPods())
		}))
	for _, gr := range clusterview.WorkloadResources {
		b = b.WatchesRawSource(&source.Informer{Informer: r.View.WorkloadInformer(gr), Handler: handler.Funcs{
			// The pods of a workload there at the start are added by
			// their own events; one that gains the label later has its
			// namespace's running pods looked at again.
			UpdateFunc: func(_ context.Context, e handlerUpdate, q queue) {
				if optsIn(e.ObjectNew) && !optsIn(e.ObjectOld) {
					for _, req := range candidates(r.View.Pods(e.ObjectNew.GetNamespace())) {
						q.Add(req)
					}
				}
			},
		}})
	}
	return b.Complete(r)
}

type (
	queue         = workqueue.TypedRateLimitingInterface[reconcile.Request]
	handlerEvent  = event.CreateEvent
	handlerUpdate = event.UpdateEvent
)

func optsIn(o client.Object) bool { return o.GetLabels()[v1alpha1.LabelExplicitDeletion] == "true" }

// candidates are the pods a label could be for: running, unlabelled.
func candidates(pods []*corev1.Pod) []reconcile.Request {
	var out []reconcile.Request
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.Labels[v1alpha1.LabelExplicitDeletion] != "true" {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return out
}

func addPod(q queue, o client.Object) {
	if p, ok := o.(*corev1.Pod); ok {
		for _, req := range candidates([]*corev1.Pod{p}) {
			q.Add(req)
		}
	}
}

// chain is the pod's controllers, nearest first, as far as the view has
// them: a ReplicaSet and its Deployment, or a StatefulSet, DaemonSet or
// bare ReplicaSet.
func (r *Reconciler) chain(pod *corev1.Pod) []Workload {
	var out []Workload
	ns := pod.Namespace
	ref := metav1.GetControllerOf(pod)
	for ref != nil && len(out) < 3 {
		w := r.View.Workload(ref.Kind, ns, ref.Name)
		if w == nil || w.GetUID() != ref.UID {
			break
		}
		out = append(out, Workload{Kind: ref.Kind, Name: ref.Name, Resource: clusterview.WorkloadResources[ref.Kind], Labels: w.GetLabels()})
		ref = metav1.GetControllerOfNoCopy(w)
	}
	return out
}

// Reconcile labels the pod if Decide says so.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod, ok := r.View.Pod(req.Namespace, req.Name)
	if !ok {
		return reconcile.Result{}, nil
	}
	var policies v1alpha1.ProtectionPolicyList
	if err := r.Reader.List(ctx, &policies); err != nil {
		return reconcile.Result{}, err
	}
	nsLabels, _ := r.Namespaces.NamespaceLabels(pod.Namespace)
	label, why := Decide(pod, r.chain(pod), policies.Items, nsLabels)
	if !label {
		return reconcile.Result{}, nil
	}
	// The UID makes the patch fail on a pod of the same name made since.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": pod.UID, "labels": map[string]string{v1alpha1.LabelExplicitDeletion: "true"},
	}})
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("rampart-manager"))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return reconcile.Result{}, nil // gone, or another pod now: its own events bring it
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("labelling pod %s/%s %s=true: %w", pod.Namespace, pod.Name, v1alpha1.LabelExplicitDeletion, err)
	}
	log.FromContext(ctx).Info("labelled a running pod for the node guard", "pod", req.String(), "label", v1alpha1.LabelExplicitDeletion, "why", why)
	return reconcile.Result{}, nil
}
