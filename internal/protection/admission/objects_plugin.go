package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// objectsPlugin admits Rampart's own objects: ChangeWindows (what CEL
// cannot check), new PodUnavailableBudgets once the budget webhooks reach
// their namespace, workloads asking for a generated budget, and the
// cluster-scoped kinds whose webhooks must be in force first (spec).
type objectsPlugin struct {
	WantsDirect
	WantsInForce
}

func (*objectsPlugin) Name() string { return "objects" }

func (p *objectsPlugin) Routes() []Route {
	generated := &GeneratedBudgets{Client: p.Direct}
	kinds := Kinds(Protections())
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

func (*objectsPlugin) Webhooks(_ Registration, b Builder) []Webhook {
	kinds := Kinds(Protections())
	spec := b.Webhook("objects.rampart.io", ObjectsPath, kindsRule(kinds, true, admissionregistrationv1.Create, admissionregistrationv1.Update), admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"podunavailablebudgets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	})
	spec.TimeoutSeconds = ptr.To(inForceTimeout)
	return own(Owner{}, spec, specWebhook(b, kinds))
}

// generatedBudgetPlugin admits workloads annotated
// rampart.io/generate-pub once their budget exists (served by Objects).
type generatedBudgetPlugin struct{}

func (*generatedBudgetPlugin) Name() string { return "generatedbudget" }

func (*generatedBudgetPlugin) Routes() []Route { return nil }

func (*generatedBudgetPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if !reg.GeneratedBudgets {
		return nil
	}
	// Only workloads asking for a generated budget pass the match
	// condition: annotations cannot be selected on.
	workloads := rule(admissionregistrationv1.Create, "apps", "deployments")
	workloads.Operations = append(workloads.Operations, admissionregistrationv1.Update)
	workloads.Resources = append(workloads.Resources, "statefulsets")
	workloads.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
	gen := b.Webhook(GeneratedBudgetsWebhookName, ObjectsPath, workloads)
	gen.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "generate-pub", Expression: generatePUBCondition}}
	gen.TimeoutSeconds = ptr.To(inForceTimeout)
	return own(Owner{}, gen)
}

// probePlugin is the Barrier's probe: a fresh webhook per version of the
// configuration.
type probePlugin struct{}

func (*probePlugin) Name() string { return "probe" }

func (*probePlugin) Routes() []Route { return []Route{{Path: ProbePath, Handler: Probe{}}} }

func (*probePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if reg.Token == "" {
		return nil
	}
	return own(Owner{}, probeWebhook(reg, b.Webhook))
}
