package clusterview

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// byExplicitReplicas indexes workloads labelled rampart.io/explicit-replicas=true.
const byExplicitReplicas = "explicit-replicas"

// workloadResources are the resources of View.workloads, in order.
var workloadResources = []schema.GroupResource{
	{Group: "apps", Resource: "deployments"},
	{Group: "apps", Resource: "statefulsets"},
	{Group: "apps", Resource: "replicasets"},
	{Resource: "replicationcontrollers"},
}

func explicitReplicas(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetLabels()[v1alpha1.LabelExplicitReplicas] != "true" {
		return nil, nil
	}
	return []string{"true"}, nil
}

// watchExplicitReplicas indexes labelled workloads and signals Changes
// whenever the set of them may have changed.
func (v *View) watchExplicitReplicas() error {
	for _, inf := range v.workloads {
		if err := inf.AddIndexers(cache.Indexers{byExplicitReplicas: explicitReplicas}); err != nil {
			return err
		}
	}
	return nil
}

func (v *View) explicitHandler() cache.ResourceEventHandler {
	labelled := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		keys, _ := explicitReplicas(obj)
		return len(keys) > 0
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if labelled(obj) {
				v.signal()
			}
		},
		UpdateFunc: func(old, obj any) {
			if labelled(old) != labelled(obj) {
				v.signal()
			}
		},
		DeleteFunc: func(obj any) {
			if labelled(obj) {
				v.signal()
			}
		},
	}
}

// Changes signals (coalesced) that what the webhook configurations depend
// on may have changed.
func (v *View) Changes() <-chan struct{} { return v.changes }

func (v *View) signal() {
	select {
	case v.changes <- struct{}{}:
	default:
	}
}

// ExplicitReplicaTargets implements admission.ClusterView.
func (v *View) ExplicitReplicaTargets() []string {
	var out []string
	for i, inf := range v.workloads {
		objs, _ := inf.GetIndexer().ByIndex(byExplicitReplicas, "true")
		gr := workloadResources[i]
		for _, o := range objs {
			if m, err := meta.Accessor(o); err == nil {
				out = append(out, gr.Group+"/"+gr.Resource+"/"+m.GetNamespace()+"/"+m.GetName())
			}
		}
	}
	slices.Sort(out)
	return out
}

// WorkloadLabels implements admission.ClusterView.
func (v *View) WorkloadLabels(gr schema.GroupResource, ns, name string) (map[string]string, types.UID, bool) {
	i := slices.Index(workloadResources, gr)
	if i < 0 {
		return nil, "", false
	}
	obj, ok, err := v.workloads[i].GetIndexer().GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil, "", false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, "", false
	}
	return m.GetLabels(), m.GetUID(), true
}
