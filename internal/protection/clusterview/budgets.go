package clusterview

import (
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/protection/budget"
)

// BudgetPod is what budgets read of a pod.
func BudgetPod(p *corev1.Pod) budget.Pod {
	bp := budget.Pod{Name: p.Name, UID: string(p.UID), Labels: p.Labels, Created: p.CreationTimestamp.Time, Node: p.Spec.NodeName,
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

// Budgets is the view of PodUnavailableBudgets: the index of the budgets
// and the pods they cover, and the workloads that set their totals. The
// informers feed it every pod; the manager feeds it the budgets.
type Budgets struct {
	informers    *Informers
	index        *budget.Index
	onBudgetPods func(pod, ns string, budgets []budget.Key)
}

func newBudgets(c *Informers) *Budgets {
	b := &Budgets{informers: c, index: budget.NewIndex()}
	c.handle(pods, b.budgetPodsHandler())
	for _, gr := range append(slices.Clone(workloadResources), jobs) {
		c.handle(gr, b.workloadReplicasHandler())
	}
	return b
}

// Index is the index of budgets and the pods they cover.
func (v *Budgets) Index() *budget.Index { return v.index }

// HasSynced is false until the caches hold the whole cluster.
func (v *Budgets) HasSynced() bool { return v.informers.HasSynced() }

// OnBudgetPods sets a function called with the budgets whose pods
// changed, and the namespace and name of a pod whose coverage may have
// changed. Set it before Start; it must not block.
func (v *Budgets) OnBudgetPods(f func(pod string, ns string, budgets []budget.Key)) {
	v.onBudgetPods = f
}

func (v *Budgets) budgetPodsHandler() cache.ResourceEventHandler {
	set := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		bp := BudgetPod(p)
		bp.NodeLabels = v.NodeLabels(p.Spec.NodeName)
		now, before := v.index.SetPod(p.Namespace, bp)
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
				if keys := v.index.DeletePod(m.GetNamespace(), m.GetName()); len(keys) > 0 && v.onBudgetPods != nil {
					v.onBudgetPods("", m.GetNamespace(), keys)
				}
			}
		},
	}
}

// workloadReplicasHandler recomputes the budgets of a namespace when a
// workload there changes its replicas (a Job, the pods it runs at once):
// their totals follow.
func (v *Budgets) workloadReplicasHandler() cache.ResourceEventHandler {
	changed := func(obj any) {
		m, err := meta.Accessor(obj)
		if err != nil || v.onBudgetPods == nil {
			return
		}
		if keys := v.index.Keys(m.GetNamespace()); len(keys) > 0 {
			v.onBudgetPods("", m.GetNamespace(), keys)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			a, _ := budgetTotal(old)
			b, _ := budgetTotal(obj)
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
// workload ("Kind/name") and its desired replicas (a Job's: the pods it
// runs at once, see jobPods); ok is false when the
// workload is not cached.
func (v *Budgets) ControllerReplicas(ns, controller string) (top string, replicas int32, ok bool) {
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
		obj, found := get(v.informers.informer(replicaSets))
		if !found {
			return controller, 0, false
		}
		rs := obj.(*appsv1.ReplicaSet)
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.Kind == "Deployment" {
			return v.ControllerReplicas(ns, "Deployment/"+ref.Name)
		}
		return controller, orOne(rs.Spec.Replicas), true
	case "Deployment":
		if obj, found := get(v.informers.informer(deployments)); found {
			return controller, orOne(obj.(*appsv1.Deployment).Spec.Replicas), true
		}
	case "StatefulSet":
		if obj, found := get(v.informers.informer(statefulSets)); found {
			return controller, orOne(obj.(*appsv1.StatefulSet).Spec.Replicas), true
		}
	case "ReplicationController":
		if obj, found := get(v.informers.informer(replicationControllers)); found {
			return controller, orOne(obj.(*corev1.ReplicationController).Spec.Replicas), true
		}
	case "Job":
		// A gang of a Job's workers is sized by the Job, so that a worker
		// deleted and not yet replaced is still missed.
		if obj, found := get(v.informers.informer(jobs)); found {
			return controller, jobPods(obj.(*batchv1.Job)), true
		}
	default:
		// A custom workload with a scale subresource.
		if n, found := v.customReplicas(kind, ns+"/"+name); found {
			return controller, n, true
		}
	}
	return controller, 0, false
}

// customReplicas are the replicas of a cached custom workload of kind.
func (v *Budgets) customReplicas(kind, key string) (replicas int32, found bool) {
	v.informers.eachScaleCR(func(_ schema.GroupVersionResource, store cache.Store) {
		obj, ok, err := store.GetByKey(key)
		if u, isU := obj.(*unstructured.Unstructured); !found && err == nil && ok && isU && u.GetKind() == kind {
			n, _, _ := unstructured.NestedInt64(u.Object, replicasField)
			replicas, found = int32(n), true
		}
	})
	return replicas, found
}

// PodLabels are a cached pod's labels.
func (v *Budgets) PodLabels(ns, name string) (map[string]string, bool) {
	obj, ok, err := v.informers.informer(pods).GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	return m.GetLabels(), true
}

// NodeUnavailable says why a node cannot run pods now: "NotReady" when its
// Ready condition is not True (False, or Unknown once the node lifecycle
// controller stops hearing from it), "unreachable" when it carries the
// node controller's unreachable or not-ready taint. "" for a Ready node and
// for one the cache has not seen (decided as Ready: never a reason to let
// a healthy pod go).
func (v *Budgets) NodeUnavailable(name string) string {
	obj, ok, err := v.informers.informer(nodes).GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return ""
	}
	n, isNode := obj.(*corev1.Node)
	if !isNode {
		return ""
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return "NotReady"
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return "unreachable"
		}
	}
	return ""
}

// NodeLabels are a cached node's labels (read-only), nil if not cached.
func (v *Budgets) NodeLabels(name string) map[string]string {
	if name == "" {
		return nil
	}
	obj, ok, err := v.informers.informer(nodes).GetIndexer().GetByKey(name)
	if n, isNode := obj.(*corev1.Node); err == nil && ok && isNode {
		return n.Labels
	}
	return nil
}

// OwnerAlive says whether a pod's owner is cached as alive: present with
// the same UID and not being deleted. known is false for a kind the view
// does not cache (a custom workload): ask the API server.
func (v *Budgets) OwnerAlive(ns string, ref metav1.OwnerReference) (alive, known bool) {
	gr, ok := WorkloadResources[ref.Kind]
	if ref.Kind == "Job" && strings.HasPrefix(ref.APIVersion, "batch/") {
		gr, ok = jobs, true
	}
	if !ok || schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind).Group != gr.Group {
		return false, false
	}
	obj, found, err := v.informers.informer(gr).GetIndexer().GetByKey(ns + "/" + ref.Name)
	if err != nil || !found {
		return false, true
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false, false
	}
	return m.GetUID() == ref.UID && m.GetDeletionTimestamp() == nil, true
}

// revisionAnnotation is the Deployment controller's revision, on a
// Deployment and on each of its ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// Surplus says whether pod is one its controller removes because it was
// scaled down (by a user, kubectl scale, or a HorizontalPodAutoscaler),
// not replaced: a ReplicaSet (or ReplicationController) asking for fewer
// pods than it last counted, unless it is an older ReplicaSet its
// Deployment is rolling away from (a rollout's deletes stay judged); a
// StatefulSet's pod of an ordinal at or past its replicas. false when the
// owner is not cached.
func (v *Budgets) Surplus(ns string, ref metav1.OwnerReference, pod string) bool {
	get := func(gr schema.GroupResource, name string) (any, bool) {
		obj, found, err := v.informers.informer(gr).GetIndexer().GetByKey(ns + "/" + name)
		if err != nil || !found {
			return nil, false
		}
		m, err := meta.Accessor(obj)
		return obj, err == nil && m.GetDeletionTimestamp() == nil
	}
	switch ref.Kind {
	case "ReplicaSet":
		obj, ok := get(replicaSets, ref.Name)
		rs, isRS := obj.(*appsv1.ReplicaSet)
		if !ok || !isRS || rs.UID != ref.UID || rs.Spec.Replicas == nil || *rs.Spec.Replicas >= rs.Status.Replicas {
			return false
		}
		d := metav1.GetControllerOf(rs)
		if d == nil || d.Kind != "Deployment" {
			return true
		}
		obj, ok = get(deployments, d.Name)
		dep, isDep := obj.(*appsv1.Deployment)
		return ok && isDep && dep.UID == d.UID && dep.Annotations[revisionAnnotation] != "" &&
			dep.Annotations[revisionAnnotation] == rs.Annotations[revisionAnnotation]
	case "ReplicationController":
		obj, ok := get(replicationControllers, ref.Name)
		rc, isRC := obj.(*corev1.ReplicationController)
		return ok && isRC && rc.UID == ref.UID && rc.Spec.Replicas != nil && *rc.Spec.Replicas < rc.Status.Replicas
	case "StatefulSet":
		obj, ok := get(statefulSets, ref.Name)
		sts, isSTS := obj.(*appsv1.StatefulSet)
		if !ok || !isSTS || sts.UID != ref.UID || !strings.HasPrefix(pod, sts.Name+"-") {
			return false
		}
		ordinal, err := strconv.Atoi(strings.TrimPrefix(pod, sts.Name+"-"))
		replicas := int32(1)
		if sts.Spec.Replicas != nil {
			replicas = *sts.Spec.Replicas
		}
		return err == nil && ordinal >= int(replicas)
	}
	return false
}

// Nodes are the cached nodes sel selects, slimmed to what the decisions
// read (labels, unschedulable, taints, the Ready condition); read-only.
func (v *Budgets) Nodes(sel labels.Selector) []*corev1.Node {
	var out []*corev1.Node
	for _, obj := range v.informers.informer(nodes).GetIndexer().List() {
		if n, ok := obj.(*corev1.Node); ok && sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	return out
}

// NodeCount counts the cluster's nodes and those NotReady or unreachable
// (see NodeUnavailable).
func (v *Budgets) NodeCount() budget.NodeCount {
	var n budget.NodeCount
	for _, obj := range v.informers.informer(nodes).GetIndexer().List() {
		node, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		n.Total++
		if v.NodeUnavailable(node.Name) != "" {
			n.NotReady++
		}
	}
	return n
}
