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
type objectsPlugin struct{}

func (objectsPlugin) Name() string { return "objects" }

func (objectsPlugin) Routes(d Deps) []Route {
	generated := &GeneratedBudgets{Client: d.Direct}
	return []Route{
		{Path: ObjectsPath, Handler: Objects{
			"changewindows":         WindowSpec{InForce: d.InForce},
			"podunavailablebudgets": &BudgetAdmission{InForce: d.InForce},
			"deployments":           generated,
			"statefulsets":          generated,
		}},
		{Path: SpecPath, Handler: Spec{InForce: d.InForce}},
	}
}

func (objectsPlugin) Webhooks(_ Registration, b Builder) []Webhook {
	spec := b.Webhook("objects.rampart.io", ObjectsPath, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"changewindows"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}, admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"podunavailablebudgets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	})
	spec.TimeoutSeconds = ptr.To(inForceTimeout)
	return own(Owner{}, spec, specWebhook(b.Webhook))
}

// generatedBudgetPlugin admits workloads annotated
// rampart.io/generate-pub once their budget exists (served by Objects).
type generatedBudgetPlugin struct{}

func (generatedBudgetPlugin) Name() string { return "generatedbudget" }

func (generatedBudgetPlugin) Routes(Deps) []Route { return nil }

func (generatedBudgetPlugin) Webhooks(reg Registration, b Builder) []Webhook {
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

func (probePlugin) Name() string { return "probe" }

func (probePlugin) Routes(Deps) []Route { return []Route{{Path: ProbePath, Handler: Probe{}}} }

func (probePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if reg.Token == "" {
		return nil
	}
	return own(Owner{}, probeWebhook(reg, b.Webhook))
}
