package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// windowPlugin is the protection ChangeWindows give: a webhook per
// window, scoped to its namespace, resources and selector.
type windowPlugin struct{}

func (windowPlugin) Name() string { return "changewindow" }

func (windowPlugin) Routes(d Deps) []Route {
	return []Route{
		{Path: WindowPrefix, Handler: &Windows{Reader: d.Cache, Live: d.Direct, Recorder: d.Recorder, Mapper: d.Mapper}, WithContext: WindowFromPath},
		{Path: WindowSpecPath, Handler: WindowSpec{InForce: d.InForce}},
	}
}

func (windowPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	var out []Webhook
	for _, w := range reg.Windows {
		ops := w.Spec.Operations
		if len(ops) == 0 {
			ops = []v1alpha1.WindowOperation{"UPDATE"}
		}
		var rules []admissionregistrationv1.RuleWithOperations
		for _, r := range w.Spec.Resources {
			rl := rule("", "", "")
			rl.Operations = nil
			for _, op := range ops {
				rl.Operations = append(rl.Operations, admissionregistrationv1.OperationType(op))
			}
			rl.APIGroups, rl.Resources = r.APIGroups, r.Resources
			rl.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
			rules = append(rules, rl)
		}
		h := b.Webhook(w.Name+"."+w.Namespace+".window.rampart.io", WindowPrefix+w.Namespace+"/"+w.Name, rules...)
		h.NamespaceSelector = inNamespaces([]string{w.Namespace})
		h.ObjectSelector = orEverything(w.Spec.Selector)
		out = append(out, own(WindowOwner(w.Namespace, w.Name), h)...)
	}
	return out
}
