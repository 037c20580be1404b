package deletion

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// View is the read-only picture of the cluster the decision needs. It is
// served from informer caches and their indexes: no method may call the
// API server, and each must stay cheap on a namespace of 10,000 pods.
type View interface {
	// LivePods are the non-terminal pods of a namespace.
	LivePods(namespace string) Sample
	// BoundClaims are the bound PersistentVolumeClaims of a namespace.
	BoundClaims(namespace string) Sample
	// ScaledWorkloads are the workloads of a namespace with replicas > 0.
	ScaledWorkloads(namespace string) Sample
	// ProtectedObjects are the objects in a namespace that are themselves
	// protected, by label or by policy.
	ProtectedObjects(namespace string) Sample
	// CustomResources are the custom resources of a CRD left in any
	// namespace.
	CustomResources(crd string) Sample
	// Dependents are the live objects naming uid in their ownerReferences.
	Dependents(uid types.UID) Sample
	// LivePodsOf are the non-terminal pods owned by uid, directly or
	// through one intermediate owner (Deployment → ReplicaSet → Pod,
	// CronJob → Job → Pod).
	LivePodsOf(uid types.UID) Sample
}

// Sample is a count with a few names to show.
type Sample struct {
	Count int
	// Examples are up to MaxExamples names, e.g. "pod/web-1".
	Examples []string
}

// MaxExamples is how many names a Sample carries.
const MaxExamples = 3

// Probe lists the ways a DELETE of r would cascade.
type Probe func(r Request, v View) []Finding

var (
	namespaces = schema.GroupResource{Resource: "namespaces"}
	crds       = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
)

// probeFor picks the probe by resource: one engine, pluggable probes.
func probeFor(r Request) Probe {
	switch {
	case r.Resource == namespaces:
		return namespaceProbe
	case r.Resource == crds:
		return crdProbe
	case r.Workload:
		return workloadProbe
	default:
		return ownerProbe
	}
}

// found appends a finding when its sample is not empty.
func found(fs []Finding, what string, s Sample, fix string) []Finding {
	if s.Count == 0 {
		return fs
	}
	return append(fs, Finding{What: what, Sample: s, Fix: fix})
}

// namespaceProbe: deleting a namespace deletes everything in it, whatever
// the propagation policy.
func namespaceProbe(r Request, v View) []Finding {
	var fs []Finding
	fs = found(fs, "workloads with replicas > 0", v.ScaledWorkloads(r.Name),
		fmt.Sprintf("Scale its workloads to 0 first (kubectl rampart scale -n %s KIND/NAME --replicas 0).", r.Name))
	fs = found(fs, "non-terminal pods", v.LivePods(r.Name), "")
	fs = found(fs, "bound PersistentVolumeClaims", v.BoundClaims(r.Name),
		fmt.Sprintf("Release its volumes first (kubectl delete pvc -n %s --all, once their data is safe).", r.Name))
	fs = found(fs, "protected objects", v.ProtectedObjects(r.Name),
		"Lift the protection of the objects inside first.")
	return fs
}

// crdProbe: deleting a CRD deletes every custom resource of it.
func crdProbe(r Request, v View) []Finding {
	return found(nil, "custom resources", v.CustomResources(r.Name),
		fmt.Sprintf("Delete them first if that is intended: kubectl delete %s --all --all-namespaces.", r.Name))
}

// workloadProbe: a workload with replicas or live pods is a running
// business; delete it only once scaled to 0 (explicit deletion), or orphan
// its pods.
func workloadProbe(r Request, v View) []Finding {
	if r.Propagation == metav1.DeletePropagationOrphan {
		return nil
	}
	var fs []Finding
	scale := fmt.Sprintf("Scale it to 0 first, then delete it: %s && %s.",
		r.Kubectl("rampart scale", r.Ref()+" --replicas 0"), r.Kubectl("delete", r.Ref()))
	if r.Replicas != nil && *r.Replicas > 0 {
		fs = append(fs, Finding{What: "desired replicas", Sample: Sample{Count: int(*r.Replicas)}, Fix: scale})
		scale = ""
	}
	fs = found(fs, "live pods", v.LivePodsOf(r.UID), scale)
	return fs
}

// ownerProbe: any other object cascades to the objects it owns.
func ownerProbe(r Request, v View) []Finding {
	if r.Propagation == metav1.DeletePropagationOrphan {
		return nil
	}
	return found(nil, "live dependents", v.Dependents(r.UID),
		"Delete or re-own them first, or delete with --cascade=orphan to keep them.")
}
