package clusterview

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/protection/deletion"
)

// slim drops what no decision reads before an object enters a cache: a
// pod keeps its metadata, node and phase; a workload its replicas; a claim
// its phase. Managed fields go everywhere but the manager's own (they say
// which pod labels it wrote: explicitdeletion takes back only those).
// This keeps the manager's memory proportional to the number of objects,
// not their size.
func slim(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(ownManagedFields(m.GetManagedFields()))
		if a := m.GetAnnotations(); len(a) > 0 {
			delete(a, corev1.LastAppliedConfigAnnotation)
		}
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		o.Spec = corev1.PodSpec{NodeName: o.Spec.NodeName}
		st := corev1.PodStatus{Phase: o.Status.Phase}
		// Budgets count Ready pods.
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.PodReady {
				st.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		o.Status = st
	case *corev1.PersistentVolumeClaim:
		o.Spec = corev1.PersistentVolumeClaimSpec{}
		o.Status = corev1.PersistentVolumeClaimStatus{Phase: o.Status.Phase}
	case *appsv1.Deployment:
		o.Spec = appsv1.DeploymentSpec{Replicas: o.Spec.Replicas}
		o.Status = appsv1.DeploymentStatus{}
	case *appsv1.StatefulSet:
		o.Spec = appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas}
		o.Status = appsv1.StatefulSetStatus{}
	case *appsv1.ReplicaSet:
		// Budgets tell a scale-down's surplus pods by replicas wanted
		// against counted (Budgets.Surplus).
		o.Spec = appsv1.ReplicaSetSpec{Replicas: o.Spec.Replicas}
		o.Status = appsv1.ReplicaSetStatus{Replicas: o.Status.Replicas}
	case *corev1.ReplicationController:
		o.Spec = corev1.ReplicationControllerSpec{Replicas: o.Spec.Replicas}
		o.Status = corev1.ReplicationControllerStatus{Replicas: o.Status.Replicas}
	case *batchv1.Job:
		// Budgets size a Job's pods by how many it runs at once.
		o.Spec = batchv1.JobSpec{Parallelism: o.Spec.Parallelism, Completions: o.Spec.Completions, Suspend: o.Spec.Suspend}
		o.Status = batchv1.JobStatus{Succeeded: o.Status.Succeeded, Conditions: jobEnding(o.Status.Conditions)}
	case *appsv1.DaemonSet:
		o.Spec, o.Status = appsv1.DaemonSetSpec{}, appsv1.DaemonSetStatus{}
	case *appsv1.ControllerRevision:
		o.Data.Raw, o.Data.Object = nil, nil
	case *corev1.ConfigMap:
		o.Data, o.BinaryData = nil, nil
	case *corev1.Service:
		o.Spec, o.Status = corev1.ServiceSpec{}, corev1.ServiceStatus{}
	case *corev1.Node:
		// Budgets read whether a node is Ready and reachable.
		o.Spec = corev1.NodeSpec{Unschedulable: o.Spec.Unschedulable, Taints: o.Spec.Taints}
		st := corev1.NodeStatus{}
		for _, c := range o.Status.Conditions {
			if c.Type == corev1.NodeReady {
				st.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		o.Status = st
	}
	return obj, nil
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// livePodNamespace indexes non-terminal pods by namespace.
func livePodNamespace(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || terminal(p) {
		return nil, nil
	}
	return []string{p.Namespace}, nil
}

// boundClaimNamespace indexes bound claims by namespace.
func boundClaimNamespace(obj any) ([]string, error) {
	c, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || c.Status.Phase != corev1.ClaimBound {
		return nil, nil
	}
	return []string{c.Namespace}, nil
}

// scaledWorkloadNamespace indexes workloads with replicas > 0 by
// namespace. An unset replicas field defaults to 1.
func scaledWorkloadNamespace(obj any) ([]string, error) {
	n, ok := scaledWorkloadReplicas(obj)
	m, err := meta.Accessor(obj)
	if !ok || n == 0 || err != nil {
		return nil, nil
	}
	return []string{m.GetNamespace()}, nil
}

// scaledWorkloadReplicas is a built-in workload's spec.replicas (an unset
// field defaults to 1); ok is false for other objects.
func scaledWorkloadReplicas(obj any) (int32, bool) {
	var r *int32
	switch o := obj.(type) {
	case *appsv1.Deployment:
		r = o.Spec.Replicas
	case *appsv1.StatefulSet:
		r = o.Spec.Replicas
	case *appsv1.ReplicaSet:
		r = o.Spec.Replicas
	case *corev1.ReplicationController:
		r = o.Spec.Replicas
	default:
		return 0, false
	}
	if r == nil {
		return 1, true
	}
	return *r, true
}

// jobPods is how many pods a Job runs at once while it runs: its
// parallelism (1 when unset), no more than the completions it still needs.
// What a budget over a Job's pods counts them against, as replicas are for
// other workloads. A Job suspended (as Kueue does to preempt it) or ending
// (failed past its deadline or backoff limit, or succeeded) wants none:
// the Job controller deletes its pods then, and a budget must not hold
// them (do no harm).
func jobPods(j *batchv1.Job) int32 {
	if ptr.Deref(j.Spec.Suspend, false) || len(jobEnding(j.Status.Conditions)) > 0 {
		return 0
	}
	n := ptr.Deref(j.Spec.Parallelism, 1)
	if c := j.Spec.Completions; c != nil {
		n = min(n, max(*c-j.Status.Succeeded, 0))
	}
	return n
}

// jobEnding keeps the conditions of a Job that is finished or about to be
// (its pods are being removed): Complete, Failed, FailureTarget and
// SuccessCriteriaMet, when True.
func jobEnding(cs []batchv1.JobCondition) []batchv1.JobCondition {
	var out []batchv1.JobCondition
	for _, c := range cs {
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobFailed, batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:
			if c.Status == corev1.ConditionTrue {
				out = append(out, batchv1.JobCondition{Type: c.Type, Status: c.Status})
			}
		}
	}
	return out
}

// budgetTotal is the pods a workload (or Job) wants, for a budget's
// total.
func budgetTotal(obj any) (int32, bool) {
	if j, ok := obj.(*batchv1.Job); ok {
		return jobPods(j), true
	}
	return scaledWorkloadReplicas(obj)
}

// ownerUIDs indexes an object by the UIDs of its owners, unless it is
// already being deleted or, for a pod, has terminated: neither is a live
// dependent.
func ownerUIDs(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && terminal(p) {
		return nil, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil || m.GetDeletionTimestamp() != nil {
		return nil, nil
	}
	refs := m.GetOwnerReferences()
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = string(r.UID)
	}
	return out, nil
}

// sampleOf counts the objects under an index value and names a few.
func sampleOf(idx cache.Indexer, index, value, kind string, withNamespace bool) deletion.Sample {
	objs, err := idx.ByIndex(index, value)
	if err != nil || len(objs) == 0 {
		return deletion.Sample{}
	}
	s := deletion.Sample{Count: len(objs)}
	for _, o := range objs[:min(len(objs), deletion.MaxExamples)] {
		m, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		name := kind + "/" + m.GetName()
		if withNamespace {
			name = qualified(m.GetNamespace(), name)
		}
		s.Examples = append(s.Examples, name)
	}
	slices.Sort(s.Examples)
	return s
}

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// merge adds two samples, keeping at most MaxExamples names.
func merge(a, b deletion.Sample) deletion.Sample {
	a.Count += b.Count
	for _, e := range b.Examples {
		if len(a.Examples) == deletion.MaxExamples {
			break
		}
		a.Examples = append(a.Examples, e)
	}
	return a
}

// FieldManager is the name the manager writes objects under
// (client.FieldOwner): its entries in managedFields say what it wrote.
const FieldManager = "rampart-manager"

func ownManagedFields(in []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range in {
		if e.Manager == FieldManager {
			out = append(out, e)
		}
	}
	return out
}
