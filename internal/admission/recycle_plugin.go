package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

// recyclePlugin is the recycle bin's own scope: a webhook per
// RecyclePolicy that keeps a copy of each object the policy selects
// before its delete is admitted. Protected objects need none: the
// deletion webhooks keep them (Deletion.Bin).
type recyclePlugin struct{}

func (recyclePlugin) Name() string { return "recyclepolicy" }

func (recyclePlugin) Routes(d Deps) []Route {
	return []Route{{Path: RecyclePrefix, Handler: &Recycle{Reader: d.Cache, Live: d.Direct, Bin: d.Bin, Recorder: d.Recorder, Mapper: d.Mapper},
		WithContext: PolicyFromPath(RecyclePrefix)}}
}

func (recyclePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if !reg.RecycleBin {
		// Nothing would be kept: a webhook would only add latency.
		return nil
	}
	var out []Webhook
	for _, p := range reg.RecyclePolicies {
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range p.Spec.Resources {
			rules = append(rules, deleteRule(r))
		}
		h := b.Webhook(p.Name+".recycle.rampart.io", RecyclePrefix+p.Name, rules...)
		h.NamespaceSelector = withNotOwn(p.Spec.NamespaceSelector, b.NotOwn)
		h.ObjectSelector = orEverything(p.Spec.ObjectSelector)
		// Fails closed: a delete the bin could not keep is refused
		// (RecyclePolicy's documented promise). Storing a copy is one
		// synced write; 10 s leaves room for a slow object store.
		h.TimeoutSeconds = ptr.To(int32(10))
		out = append(out, own(RecycleOwner(p.Name), h)...)
	}
	return out
}
