package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// ObjectsPlugin admits Rampart's own objects: ChangeWindows (what CEL
// cannot check), new PodUnavailableBudgets once the budget webhooks reach
// their namespace, workloads asking for a generated budget, and the
// cluster-scoped kinds whose webhooks must be in force first (spec).
type ObjectsPlugin struct {
	WantsDirect
	WantsInForce
	WantsKinds
}

func (*ObjectsPlugin) Name() string { return "objects" }

func (p *ObjectsPlugin) Routes() []Route {
	generated := &GeneratedBudgets{Client: p.Direct}
	kinds := p.Kinds
	spec := Spec{InForce: p.InForce, Kinds: kinds}
	objects := Objects{
		"podunavailablebudgets": &BudgetAdmission{InForce: p.InForce},
		"deployments":           generated,
		"statefulsets":          generated,
	}
	for _, k := range kinds {
		if k.Namespaced {
			objects[k.Resource] = spec
		}
	}
	return []Route{{Path: ObjectsPath, Handler: objects}, {Path: SpecPath, Handler: spec}}
}

func (*ObjectsPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	kinds := Kinds(reg.Protections)
	spec := b.Webhook("objects.rampart.io", ObjectsPath, kindsRule(kinds, true, admissionregistrationv1.Create, admissionregistrationv1.Update), admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"podunavailablebudgets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	})
	spec.TimeoutSeconds = ptr.To(inForceTimeout)
	return Own(Owner{}, spec, specWebhook(b, kinds))
}

// GeneratedBudgetPlugin admits workloads annotated
// rampart.io/generate-pub once their budget exists (served by Objects).
type GeneratedBudgetPlugin struct{}

func (*GeneratedBudgetPlugin) Name() string { return "generatedbudget" }

func (*GeneratedBudgetPlugin) Routes() []Route { return nil }

func (*GeneratedBudgetPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if !reg.GeneratedBudgets {
		return nil
	}
	// Only workloads asking for a generated budget pass the match
	// condition: annotations cannot be selected on.
	workloads := Rule(admissionregistrationv1.Create, "apps", "deployments")
	workloads.Operations = append(workloads.Operations, admissionregistrationv1.Update)
	workloads.Resources = append(workloads.Resources, "statefulsets")
	workloads.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
	gen := b.Webhook(GeneratedBudgetsWebhookName, ObjectsPath, workloads)
	gen.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "generate-pub", Expression: generatePUBCondition}}
	gen.TimeoutSeconds = ptr.To(inForceTimeout)
	return Own(Owner{}, gen)
}

// ProbePlugin is the Barrier's probe: a fresh webhook per version of the
// configuration.
type ProbePlugin struct{}

func (*ProbePlugin) Name() string { return "probe" }

func (*ProbePlugin) Routes() []Route { return []Route{{Path: ProbePath, Handler: Probe{}}} }

func (*ProbePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if reg.Token == "" {
		return nil
	}
	return Own(Owner{}, probeWebhook(reg, b.Webhook))
}
