// Package explicitdeletion labels rampart.io/explicit-deletion=true the
// running pods of the workloads that opt in: a workload labelled so itself
// (Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController),
// or one an enforced
// ProtectionPolicy with explicitDeletion covers. The node guard then lets
// only an API delete end those pods. A pod is labelled once it runs, so a
// pod that never started can still be cleaned up by the kubelet at will.
// When the workload opts out, the manager removes the labels it wrote,
// and only those.
package explicitdeletion

import (
	"bytes"
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
	"github.com/rampart-io/rampart/internal/protection/clusterview"
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

// Action is what Decide asks for.
type Action int

const (
	// Leave the pod as it is.
	Leave Action = iota
	// Label: add rampart.io/explicit-deletion=true.
	Label
	// Unlabel: remove the label the manager added; nothing opts in any
	// more (the workload's label removed, the policy deleted, narrowed or
	// set to Warn).
	Unlabel
)

// Decide says what to do with pod's label now, and why. A pod is labelled
// once it runs, is not being deleted, and a workload of its chain opts in
// (labelled itself, or covered by an enforced policy with
// explicitDeletion; nsLabels are its namespace's labels). The manager
// takes back a label it wrote (its managedFields say so) once no workload
// opts in, if it knows the pod's whole chain: a label someone else wrote
// is theirs, and a workload missing from the view is no proof of opting
// out.
func Decide(pod *corev1.Pod, chain []Workload, complete bool, policies []v1alpha1.ProtectionPolicy, nsLabels map[string]string) (Action, string) {
	why, in := optedIn(chain, policies, nsLabels)
	labelled := pod.Labels[v1alpha1.LabelExplicitDeletion] == "true"
	switch {
	case pod.DeletionTimestamp != nil:
		return Leave, "being deleted"
	case labelled && in:
		return Leave, "already labelled"
	case labelled && !complete:
		return Leave, "labelled, and a workload of its chain is not known yet"
	case labelled && !labelledByManager(pod):
		return Leave, "labelled by someone other than Rampart's manager"
	case labelled:
		return Unlabel, "no workload of its chain opts in any more"
	case pod.Status.Phase != corev1.PodRunning:
		return Leave, "not running"
	case in:
		return Label, why
	}
	return Leave, "no workload of its chain opts in"
}

func optedIn(chain []Workload, policies []v1alpha1.ProtectionPolicy, nsLabels map[string]string) (string, bool) {
	for _, w := range chain {
		if w.Labels[v1alpha1.LabelExplicitDeletion] == "true" {
			return fmt.Sprintf("%s %s is labelled %s=true", w.Kind, w.Name, v1alpha1.LabelExplicitDeletion), true
		}
		for i := range policies {
			p := &policies[i]
			if p.Spec.ExplicitDeletion && policy.Enforced(p) && policy.Covers(p, w.Resource, nsLabels, w.Labels) {
				return fmt.Sprintf("ProtectionPolicy %s (explicitDeletion) covers %s %s", p.Name, w.Kind, w.Name), true
			}
		}
	}
	return "", false
}

// labelledByManager: the manager's entry in the pod's managedFields holds
// the label (the cluster view keeps the manager's entries only).
func labelledByManager(pod *corev1.Pod) bool {
	for _, e := range pod.ManagedFields {
		if e.Manager == clusterview.FieldManager && e.FieldsV1 != nil &&
			bytes.Contains(e.FieldsV1.Raw, []byte(`"f:`+v1alpha1.LabelExplicitDeletion+`"`)) {
			return true
		}
	}
	return false
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
			// their own events; one that gains or loses the label later
			// has its namespace's running pods looked at again.
			UpdateFunc: func(_ context.Context, e handlerUpdate, q queue) {
				if optsIn(e.ObjectNew) != optsIn(e.ObjectOld) {
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

// candidates are the pods whose label may have to change: running ones,
// and labelled ones.
func candidates(pods []*corev1.Pod) []reconcile.Request {
	var out []reconcile.Request
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning || p.Labels[v1alpha1.LabelExplicitDeletion] == "true" {
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
// them: a ReplicaSet and its Deployment, or a StatefulSet, DaemonSet,
// bare ReplicaSet or ReplicationController. complete says the chain ends where the pod's controllers
// end: no controller named was missing from the view.
func (r *Reconciler) chain(pod *corev1.Pod) (out []Workload, complete bool) {
	ns := pod.Namespace
	ref := metav1.GetControllerOf(pod)
	for ref != nil && len(out) < 3 {
		if _, known := clusterview.WorkloadResources[ref.Kind]; !known {
			return out, true // a controller of a kind that cannot opt in (a Job, a custom resource)
		}
		w := r.View.Workload(ref.Kind, ns, ref.Name)
		if w == nil || w.GetUID() != ref.UID {
			return out, false
		}
		out = append(out, Workload{Kind: ref.Kind, Name: ref.Name, Resource: clusterview.WorkloadResources[ref.Kind], Labels: w.GetLabels()})
		ref = metav1.GetControllerOfNoCopy(w)
	}
	return out, ref == nil
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
	chain, complete := r.chain(pod)
	action, why := Decide(pod, chain, complete, policies.Items, nsLabels)
	var value any
	switch action {
	case Leave:
		return reconcile.Result{}, nil
	case Label:
		value = "true"
	case Unlabel:
		value = nil // a merge patch's null removes the label
	}
	// The UID makes the patch fail on a pod of the same name made since.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": pod.UID, "labels": map[string]any{v1alpha1.LabelExplicitDeletion: value},
	}})
	target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(clusterview.FieldManager))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return reconcile.Result{}, nil // gone, or another pod now: its own events bring it
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("setting pod %s/%s's label %s to %v: %w", pod.Namespace, pod.Name, v1alpha1.LabelExplicitDeletion, value, err)
	}
	if action == Unlabel {
		log.FromContext(ctx).Info("took back the node guard's label of a pod", "pod", req.String(), "label", v1alpha1.LabelExplicitDeletion, "why", why)
		return reconcile.Result{}, nil
	}
	log.FromContext(ctx).Info("labelled a running pod for the node guard", "pod", req.String(), "label", v1alpha1.LabelExplicitDeletion, "why", why)
	return reconcile.Result{}, nil
}
