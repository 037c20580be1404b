package admission

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// flowControlPlugin is the protection DeletionFlowControls give: a
// webhook per flow control counting the deletes (and evictions) it scopes.
type flowControlPlugin struct{}

func (flowControlPlugin) Name() string { return "deletionflowcontrol" }

func (flowControlPlugin) Routes(d Deps) []Route {
	return []Route{{Path: FlowControlPrefix, Handler: &FlowControl{Client: d.Direct, Pods: d.Pods, Recorder: d.Recorder,
		Nodes: d.Nodes, PartitionThreshold: d.BudgetPartitionThreshold},
		WithContext: FlowControlFromPath}}
}

func (flowControlPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, f := range reg.FlowControls {
		var rules []admissionregistrationv1.RuleWithOperations
		evictions := f.Spec.CountEvictions == nil || *f.Spec.CountEvictions
		for _, r := range f.Spec.Resources {
			rules = append(rules, deleteRule(r))
			if evictions && (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
				(slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "*")) {
				rules = append(rules, rule(admissionregistrationv1.Create, "", "pods/eviction"))
			}
		}
		h := b.Webhook(f.Name+".flowcontrol.rampart.io", FlowControlPrefix+f.Name, rules...)
		h.NamespaceSelector = withNotOwn(f.Spec.NamespaceSelector, b.NotOwn)
		h.ObjectSelector = orEverything(f.Spec.ObjectSelector)
		// Exact means closed: a delete the flow control could not count
		// (Rampart down, or too slow under a storm) is refused, never let
		// through uncounted. Scope a flow control to what may wait.
		h.TimeoutSeconds = ptr.To(int32(10))
		out = append(out, own(FlowControlOwner(f.Name), h)...)
	}
	return out
}

// deleteRule reaches the DELETEs of the resources r names.
func deleteRule(r v1alpha1.ResourceRule) admissionregistrationv1.RuleWithOperations {
	rl := rule(admissionregistrationv1.Delete, "", "")
	rl.APIGroups, rl.Resources = r.APIGroups, r.Resources
	return rl
}
