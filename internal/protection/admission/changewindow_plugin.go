package admission

import (
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/internal/protection/changewindow"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// WindowPlugin is the protection ChangeWindows give: a webhook per
// window, scoped to its namespace, resources and selector.
type WindowPlugin struct {
	WantsCache
	WantsDirect
	WantsRecorder
	WantsMapper
	WantsInForce
}

// WindowKind is the kind whose objects are ChangeWindows.
const WindowKind = "ChangeWindow"

// WindowOwner is the owner of a ChangeWindow's webhook.
func WindowOwner(ns, name string) Owner { return Owner{Kind: WindowKind, Namespace: ns, Name: name} }

func (*WindowPlugin) Name() string { return "changewindow" }

// Objects: a window's schedule is compiled before its webhook is
// registered (cron expressions that do not parse or never fire, which the
// CRD's CEL rules cannot see).
func (*WindowPlugin) Objects() ObjectKind {
	k := NewObjectKind[v1alpha1.ChangeWindow, *v1alpha1.ChangeWindow, v1alpha1.ChangeWindowList](WindowKind, "changewindows", true)
	k.Validate = func(o client.Object) error {
		_, err := changewindow.Compile(o.(*v1alpha1.ChangeWindow).Spec, time.Now())
		return err
	}
	return k
}

func (p *WindowPlugin) Routes() []Route {
	return []Route{
		{Path: WindowPrefix, Handler: &Windows{Reader: p.Cache, Live: p.Direct, Recorder: p.Recorder, Mapper: p.Mapper}, WithContext: WindowFromPath},
		{Path: WindowSpecPath, Handler: Spec{InForce: p.InForce, Kinds: []ObjectKind{p.Objects()}}},
	}
}

func (*WindowPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, w := range ObjectsOf[*v1alpha1.ChangeWindow](reg, WindowKind) {
		ops := w.Spec.Operations
		if len(ops) == 0 {
			ops = []v1alpha1.WindowOperation{"UPDATE"}
		}
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range w.Spec.Resources {
			rl := Rule("", "", "")
			rl.Operations = nil
			for _, op := range ops {
				rl.Operations = append(rl.Operations, admissionregistrationv1.OperationType(op))
			}
			rl.APIGroups, rl.Resources = r.APIGroups, r.Resources
			rl.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
			rules = append(rules, rl)
		}
		h := b.Webhook(w.Name+"."+w.Namespace+".window.rampart.io", WindowPrefix+w.Namespace+"/"+w.Name, rules...)
		h.NamespaceSelector = InNamespaces([]string{w.Namespace})
		h.ObjectSelector = OrEverything(w.Spec.Selector)
		out = append(out, Own(WindowOwner(w.Namespace, w.Name), h)...)
	}
	return out
}
