package admit

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Plugin is the protection DeletionFlowControls give: a
// webhook per flow control counting the deletes (and evictions) it scopes,
// and one for its evictions when it has an objectSelector.
type Plugin struct {
	rampartadmission.WantsDirect
	rampartadmission.WantsPods
	rampartadmission.WantsRecorder
	rampartadmission.WantsNodes
}

// Kind is the kind whose objects are DeletionFlowControls.
const Kind = "DeletionFlowControl"

// Owner is the owner of a DeletionFlowControl's webhook.
func Owner(name string) rampartadmission.Owner { return rampartadmission.Owner{Kind: Kind, Name: name} }

func (*Plugin) Name() string { return "deletionflowcontrol" }

func (*Plugin) Objects() rampartadmission.ObjectKind {
	return rampartadmission.NewObjectKind[v1alpha1.DeletionFlowControl, *v1alpha1.DeletionFlowControl, v1alpha1.DeletionFlowControlList](Kind, "deletionflowcontrols", false)
}

func (p *Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{{Path: Prefix, Handler: &FlowControl{Client: p.Direct, Pods: p.Pods, Recorder: p.Recorder,
		Nodes: p.Nodes, PartitionThreshold: p.PartitionThreshold},
		WithContext: rampartadmission.PolicyFromPath(Prefix)}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	var out []rampartadmission.Webhook
	for _, f := range rampartadmission.ObjectsOf[*v1alpha1.DeletionFlowControl](reg, Kind) {
		var rules []admissionregistrationv1.RuleWithOperations
		evictions := false
		for _, r := range f.Spec.Resources {
			rules = append(rules, rampartadmission.DeleteRule(r))
			evictions = evictions || (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
				(slices.Contains(r.Resources, "pods") || slices.Contains(r.Resources, "*"))
		}
		evictions = evictions && (f.Spec.CountEvictions == nil || *f.Spec.CountEvictions)
		webhook := func(name string, sel *metav1.LabelSelector, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
			h := b.Webhook(name, Prefix+f.Name, rules...)
			h.NamespaceSelector = rampartadmission.WithNotOwn(f.Spec.NamespaceSelector, b.NotOwn)
			h.ObjectSelector = rampartadmission.OrEverything(sel)
			// Exact means closed: a delete the flow control could not count
			// (Rampart down, or too slow under a storm) is refused, never let
			// through uncounted. Scope a flow control to what may wait.
			h.TimeoutSeconds = ptr.To(int32(10))
			return h
		}
		evict := rampartadmission.Rule(admissionregistrationv1.Create, "", "pods/eviction")
		switch {
		case !evictions:
			out = append(out, rampartadmission.Own(Owner(f.Name), webhook(f.Name+".flowcontrol.rampart.io", f.Spec.ObjectSelector, rules...))...)
		case f.Spec.ObjectSelector == nil:
			out = append(out, rampartadmission.Own(Owner(f.Name), webhook(f.Name+".flowcontrol.rampart.io", nil, append(rules, evict)...))...)
		default:
			// An Eviction has no labels of its own, and the API server
			// matches an objectSelector against the Eviction, never the
			// pod: under the selector every eviction would skip the
			// webhook, uncounted. Evictions get a webhook without it,
			// and the handler judges the pod's labels.
			out = append(out, rampartadmission.Own(Owner(f.Name),
				webhook(f.Name+".flowcontrol.rampart.io", f.Spec.ObjectSelector, rules...),
				webhook(f.Name+".flowcontrol-evictions.rampart.io", nil, evict))...)
		}
	}
	return out
}
