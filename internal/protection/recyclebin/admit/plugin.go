package admit

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// Plugin is the recycle bin's own scope: a webhook per
// RecyclePolicy that keeps a copy of each object the policy selects
// before its delete is admitted, and the webhooks that keep what the
// namespace controller deletes in a protected namespace (contents.go).
// Protected objects need neither: the deletion webhooks keep them
// (admission.Deletion.Bin).
type Plugin struct {
	rampartadmission.WantsCache
	rampartadmission.WantsDirect
	rampartadmission.WantsBin
	rampartadmission.WantsRecorder
	rampartadmission.WantsMapper
	rampartadmission.WantsInstalledBy
	rampartadmission.WantsPolicies
	rampartadmission.WantsNamespaceContents
}

// Kind is the kind whose objects are RecyclePolicies.
const Kind = "RecyclePolicy"

// Owner is the owner of a RecyclePolicy's webhook.
func Owner(name string) rampartadmission.Owner { return rampartadmission.Owner{Kind: Kind, Name: name} }

func (*Plugin) Name() string { return "recyclepolicy" }

func (*Plugin) Objects() rampartadmission.ObjectKind {
	return rampartadmission.NewObjectKind[v1alpha1.RecyclePolicy, *v1alpha1.RecyclePolicy, v1alpha1.RecyclePolicyList](Kind, "recyclepolicies", false)
}

func (p *Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{
		{Path: Prefix, Handler: &Recycle{Reader: p.Cache, Live: p.Direct, Bin: p.Bin, Recorder: p.Recorder, Mapper: p.Mapper},
			WithContext: rampartadmission.PolicyFromPath(Prefix)},
		{Path: ContentsPath, Handler: &Contents{Bin: p.Bin, Namespaces: p.Namespaces, Policies: p.Policies,
			Tally: &recyclebin.NamespaceContents{Max: p.MaxBytes}, Recorder: p.Recorder, Clock: clock.RealClock{}}},
	}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	if !reg.RecycleBin {
		// Nothing would be kept: a webhook would only add latency.
		return nil
	}
	var out []rampartadmission.Webhook
	if reg.NamespaceContents {
		out = contentsWebhooks(reg, b)
	}
	for _, p := range rampartadmission.ObjectsOf[*v1alpha1.RecyclePolicy](reg, Kind) {
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range p.Spec.Resources {
			rules = append(rules, rampartadmission.DeleteRule(r))
		}
		h := b.Webhook(p.Name+".recycle.rampart.io", Prefix+p.Name, rules...)
		h.NamespaceSelector = rampartadmission.WithNotOwn(p.Spec.NamespaceSelector, b.NotOwn)
		h.ObjectSelector = rampartadmission.OrEverything(p.Spec.ObjectSelector)
		// Fails closed: a delete the bin could not keep is refused
		// (RecyclePolicy's documented promise). Storing a copy is one
		// synced write; 10 s leaves room for a slow object store.
		h.TimeoutSeconds = ptr.To(int32(10))
		out = append(out, rampartadmission.Own(Owner(p.Name), h)...)
	}
	return out
}
