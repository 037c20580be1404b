package clusterview

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Workloads is the view of pods and the built-in workloads that run them
// (Deployments, ReplicaSets, StatefulSets, DaemonSets,
// ReplicationControllers), read by the
// explicit-deletion controller: its informers, to watch, and lookups.
type Workloads struct {
	informers *Informers
}

// WorkloadResources are the workload kinds whose pods the view follows.
var WorkloadResources = map[string]schema.GroupResource{
	"Deployment": deployments, "ReplicaSet": replicaSets, "StatefulSet": statefulSets, "DaemonSet": daemonSets,
	"ReplicationController": replicationControllers,
}

// PodInformer is the informer of every pod (slimmed: metadata, node and
// phase).
func (v Workloads) PodInformer() cache.SharedIndexInformer { return v.informers.informer(pods) }

// WorkloadInformer is the informer of a kind of WorkloadResources.
func (v Workloads) WorkloadInformer(gr schema.GroupResource) cache.SharedIndexInformer {
	return v.informers.informer(gr)
}

// Pod is a cached pod.
func (v Workloads) Pod(ns, name string) (*corev1.Pod, bool) {
	obj, ok, err := v.PodInformer().GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// Pods are the cached pods of a namespace.
func (v Workloads) Pods(ns string) []*corev1.Pod {
	objs, _ := v.PodInformer().GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// AllPods are every cached pod.
func (v Workloads) AllPods() []*corev1.Pod {
	objs := v.PodInformer().GetIndexer().List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// Workload is a cached workload of kind (a key of WorkloadResources), nil
// if it is not cached or not such a kind.
func (v Workloads) Workload(kind, ns, name string) metav1.Object {
	gr, ok := WorkloadResources[kind]
	if !ok {
		return nil
	}
	obj, ok, err := v.informers.informer(gr).GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return m
}
