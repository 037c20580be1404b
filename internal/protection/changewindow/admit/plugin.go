package admit

import (
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/internal/protection/changewindow"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Plugin is the protection ChangeWindows give: a webhook per
// window, scoped to its namespace, resources and selector.
type Plugin struct {
	rampartadmission.WantsCache
	rampartadmission.WantsDirect
	rampartadmission.WantsRecorder
	rampartadmission.WantsMapper
	rampartadmission.WantsInForce
}

// Kind is the kind whose objects are ChangeWindows.
const Kind = "ChangeWindow"

// Owner is the owner of a ChangeWindow's webhook.
func Owner(ns, name string) rampartadmission.Owner {
	return rampartadmission.Owner{Kind: Kind, Namespace: ns, Name: name}
}

func (*Plugin) Name() string { return "changewindow" }

// Objects: a window's schedule is compiled before its webhook is
// registered (cron expressions that do not parse or never fire, which the
// CRD's CEL rules cannot see).
func (*Plugin) Objects() rampartadmission.ObjectKind {
	k := rampartadmission.NewObjectKind[v1alpha1.ChangeWindow, *v1alpha1.ChangeWindow, v1alpha1.ChangeWindowList](Kind, "changewindows", true)
	k.Validate = func(o client.Object) error {
		_, err := changewindow.Compile(o.(*v1alpha1.ChangeWindow).Spec, time.Now())
		return err
	}
	return k
}

func (p *Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{
		{Path: Prefix, Handler: &Windows{Reader: p.Cache, Live: p.Direct, Recorder: p.Recorder, Mapper: p.Mapper}, WithContext: FromPath},
		{Path: SpecPath, Handler: rampartadmission.Spec{InForce: p.InForce, Kinds: []rampartadmission.ObjectKind{p.Objects()}}},
	}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	var out []rampartadmission.Webhook
	for _, w := range rampartadmission.ObjectsOf[*v1alpha1.ChangeWindow](reg, Kind) {
		ops := w.Spec.Operations
		if len(ops) == 0 {
			ops = []v1alpha1.WindowOperation{"UPDATE"}
		}
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range w.Spec.Resources {
			rl := rampartadmission.Rule("", "", "")
			rl.Operations = nil
			for _, op := range ops {
				rl.Operations = append(rl.Operations, admissionregistrationv1.OperationType(op))
			}
			rl.APIGroups, rl.Resources = r.APIGroups, r.Resources
			rl.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
			rules = append(rules, rl)
		}
		h := b.Webhook(w.Name+"."+w.Namespace+".window.rampart.io", Prefix+w.Namespace+"/"+w.Name, rules...)
		h.NamespaceSelector = rampartadmission.InNamespaces([]string{w.Namespace})
		h.ObjectSelector = rampartadmission.OrEverything(w.Spec.Selector)
		out = append(out, rampartadmission.Own(Owner(w.Namespace, w.Name), h)...)
	}
	return out
}
