package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// RecyclePlugin is the recycle bin's own scope: a webhook per
// RecyclePolicy that keeps a copy of each object the policy selects
// before its delete is admitted. Protected objects need none: the
// deletion webhooks keep them (Deletion.Bin).
type RecyclePlugin struct {
	WantsCache
	WantsDirect
	WantsBin
	WantsRecorder
	WantsMapper
}

// RecycleKind is the kind whose objects are RecyclePolicies.
const RecycleKind = "RecyclePolicy"

// RecycleOwner is the owner of a RecyclePolicy's webhook.
func RecycleOwner(name string) Owner { return Owner{Kind: RecycleKind, Name: name} }

func (*RecyclePlugin) Name() string { return "recyclepolicy" }

func (*RecyclePlugin) Objects() ObjectKind {
	return NewObjectKind[v1alpha1.RecyclePolicy, *v1alpha1.RecyclePolicy, v1alpha1.RecyclePolicyList](RecycleKind, "recyclepolicies", false)
}

func (p *RecyclePlugin) Routes() []Route {
	return []Route{{Path: RecyclePrefix, Handler: &Recycle{Reader: p.Cache, Live: p.Direct, Bin: p.Bin, Recorder: p.Recorder, Mapper: p.Mapper},
		WithContext: PolicyFromPath(RecyclePrefix)}}
}

func (*RecyclePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if !reg.RecycleBin {
		// Nothing would be kept: a webhook would only add latency.
		return nil
	}
	var out []Webhook
	for _, p := range ObjectsOf[*v1alpha1.RecyclePolicy](reg, RecycleKind) {
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range p.Spec.Resources {
			rules = append(rules, DeleteRule(r))
		}
		h := b.Webhook(p.Name+".recycle.rampart.io", RecyclePrefix+p.Name, rules...)
		h.NamespaceSelector = WithNotOwn(p.Spec.NamespaceSelector, b.NotOwn)
		h.ObjectSelector = OrEverything(p.Spec.ObjectSelector)
		// Fails closed: a delete the bin could not keep is refused
		// (RecyclePolicy's documented promise). Storing a copy is one
		// synced write; 10 s leaves room for a slow object store.
		h.TimeoutSeconds = ptr.To(int32(10))
		out = append(out, Own(RecycleOwner(p.Name), h)...)
	}
	return out
}
