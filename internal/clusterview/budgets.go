package clusterview

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/budget"
)

// BudgetPod is what budgets read of a pod.
func BudgetPod(p *corev1.Pod) budget.Pod {
	bp := budget.Pod{Name: p.Name, Labels: p.Labels, Created: p.CreationTimestamp.Time,
		Gone: p.DeletionTimestamp != nil || terminal(p)}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			bp.Ready = c.Status == corev1.ConditionTrue
		}
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		bp.Controller = ref.Kind + "/" + ref.Name
	}
	return bp
}

// Budgets is the index of PodUnavailableBudgets and the pods they cover.
// The view feeds it every pod; the manager feeds it the budgets.
func (v *View) Budgets() *budget.Index { return v.budgets }

// OnBudgetPods sets a function called with the budgets whose pods
// changed, and the namespace and name of a pod whose coverage may have
// changed. Set it before Start; it must not block.
func (v *View) OnBudgetPods(f func(pod string, ns string, budgets []budget.Key)) { v.onBudgetPods = f }

func (v *View) budgetPodsHandler() cache.ResourceEventHandler {
	set := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now, before := v.budgets.SetPod(p.Namespace, BudgetPod(p))
		if v.onBudgetPods != nil && (len(now) > 0 || len(before) > 0) {
			v.onBudgetPods(p.Name, p.Namespace, append(now, before...))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				if keys := v.budgets.DeletePod(m.GetNamespace(), m.GetName()); len(keys) > 0 && v.onBudgetPods != nil {
					v.onBudgetPods("", m.GetNamespace(), keys)
				}
			}
		},
	}
}

// workloadReplicasHandler recomputes the budgets of a namespace when a
// workload there changes its replicas: their totals follow.
func (v *View) workloadReplicasHandler() cache.ResourceEventHandler {
	changed := func(obj any) {
		m, err := meta.Accessor(obj)
		if err != nil || v.onBudgetPods == nil {
			return
		}
		if keys := v.budgets.Keys(m.GetNamespace()); len(keys) > 0 {
			v.onBudgetPods("", m.GetNamespace(), keys)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			a, _ := scaledWorkloadReplicas(old)
			b, _ := scaledWorkloadReplicas(obj)
			if a != b {
				changed(obj)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			changed(obj)
		},
	}
}

// ControllerReplicas follows a pod's controller ("Kind/name", see
// BudgetPod) up through a ReplicaSet to its Deployment and returns the top
// workload ("Kind/name") and its desired replicas; ok is false when the
// workload is not cached.
func (v *View) ControllerReplicas(ns, controller string) (top string, replicas int32, ok bool) {
	kind, name, _ := strings.Cut(controller, "/")
	get := func(inf cache.SharedIndexInformer) (any, bool) {
		obj, found, err := inf.GetStore().GetByKey(ns + "/" + name)
		return obj, err == nil && found
	}
	orOne := func(r *int32) int32 {
		if r == nil {
			return 1
		}
		return *r
	}
	switch kind {
	case "ReplicaSet":
		obj, found := get(v.replicaSets)
		if !found {
			return controller, 0, false
		}
		rs := obj.(*appsv1.ReplicaSet)
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.Kind == "Deployment" {
			return v.ControllerReplicas(ns, "Deployment/"+ref.Name)
		}
		return controller, orOne(rs.Spec.Replicas), true
	case "Deployment":
		if obj, found := get(v.workloads[0]); found {
			return controller, orOne(obj.(*appsv1.Deployment).Spec.Replicas), true
		}
	case "StatefulSet":
		if obj, found := get(v.workloads[1]); found {
			return controller, orOne(obj.(*appsv1.StatefulSet).Spec.Replicas), true
		}
	case "ReplicationController":
		if obj, found := get(v.workloads[3]); found {
			return controller, orOne(obj.(*corev1.ReplicationController).Spec.Replicas), true
		}
	default:
		// A custom workload with a scale subresource.
		v.mu.RLock()
		defer v.mu.RUnlock()
		for _, inf := range v.scaleCRs {
			obj, found, err := inf.informer.GetStore().GetByKey(ns + "/" + name)
			if u, isU := obj.(*unstructured.Unstructured); err == nil && found && isU && u.GetKind() == kind {
				n, _, _ := unstructured.NestedInt64(u.Object, replicasField)
				return controller, int32(n), true
			}
		}
	}
	return controller, 0, false
}
