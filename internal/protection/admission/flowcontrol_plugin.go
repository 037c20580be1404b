package admission

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// flowControlPlugin is the protection DeletionFlowControls give: a
// webhook per flow control counting the deletes (and evictions) it scopes,
// and one for its evictions when it has an objectSelector.
type flowControlPlugin struct {
	WantsDirect
	WantsPods
	WantsRecorder
	WantsNodes
}

// FlowControlKind is the kind whose objects are DeletionFlowControls.
const FlowControlKind = "DeletionFlowControl"

// FlowControlOwner is the owner of a DeletionFlowControl's webhook.
func FlowControlOwner(name string) Owner { return Owner{Kind: FlowControlKind, Name: name} }

func (*flowControlPlugin) Name() string { return "deletionflowcontrol" }

func (*flowControlPlugin) Objects() ObjectKind {
	return NewObjectKind[v1alpha1.DeletionFlowControl, *v1alpha1.DeletionFlowControl, v1alpha1.DeletionFlowControlList](FlowControlKind, "deletionflowcontrols", false)
}

func (p *flowControlPlugin) Routes() []Route {
	return []Route{{Path: FlowControlPrefix, Handler: &FlowControl{Client: p.Direct, Pods: p.Pods, Recorder: p.Recorder,
		Nodes: p.Nodes, PartitionThreshold: p.PartitionThreshold},
		WithContext: FlowControlFromPath}}
}

func (*flowControlPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, f := range ObjectsOf[*v1alpha1.DeletionFlowControl](reg, FlowControlKind) {
		var rules []admissionregistrationv1.RuleWithOperations
		evictions := false
		for _, r := range f.Spec.Resources {
			rules = append(rules, deleteRule(r))
			evictions = evictions || (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
				(slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "*"))
		}
		evictions = evictions && (f.Spec.CountEvictions == nil || *f.Spec.CountEvictions)
		webhook := func(name string, sel *metav1.LabelSelector, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
			h := b.Webhook(name, FlowControlPrefix+f.Name, rules...)
			h.NamespaceSelector = withNotOwn(f.Spec.NamespaceSelector, b.NotOwn)
			h.ObjectSelector = orEverything(sel)
			// Exact means closed: a delete the flow control could not count
			// (Rampart down, or too slow under a storm) is refused, never let
			// through uncounted. Scope a flow control to what may wait.
			h.TimeoutSeconds = ptr.To(int32(10))
			return h
		}
		evict := rule(admissionregistrationv1.Create, "", "pods/eviction")
		switch {
		case !evictions:
			out = append(out, own(FlowControlOwner(f.Name), webhook(f.Name+".flowcontrol.rampart.io", f.Spec.ObjectSelector, rules...))...)
		case f.Spec.ObjectSelector == nil:
			out = append(out, own(FlowControlOwner(f.Name), webhook(f.Name+".flowcontrol.rampart.io", nil, append(rules, evict)...))...)
		default:
			// An Eviction has no labels of its own, and the API server
			// matches an objectSelector against the Eviction, never the
			// pod: under the selector every eviction would skip the
			// webhook, uncounted. Evictions get a webhook without it,
			// and the handler judges the pod's labels.
			out = append(out, own(FlowControlOwner(f.Name),
				webhook(f.Name+".flowcontrol.rampart.io", f.Spec.ObjectSelector, rules...),
				webhook(f.Name+".flowcontrol-evictions.rampart.io", nil, evict))...)
		}
	}
	return out
}

// deleteRule reaches the DELETEs of the resources r names.
func deleteRule(r v1alpha1.ResourceRule) admissionregistrationv1.RuleWithOperations {
	rl := rule(admissionregistrationv1.Delete, "", "")
	rl.APIGroups, rl.Resources = r.APIGroups, r.Resources
	return rl
}
