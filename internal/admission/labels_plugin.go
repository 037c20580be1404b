package admission

import (
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// labelsPlugin is the protection of objects labelled
// rampart.io/protection and rampart.io/explicit-replicas.
type labelsPlugin struct{}

func (labelsPlugin) Name() string { return "labels" }

func (labelsPlugin) Routes(d Deps) []Route {
	return []Route{{Path: DeletionPath, Handler: d.deletion()}, {Path: ReplicasPath, Handler: d.replicas()}}
}

func labelled(key string, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: key, Operator: metav1.LabelSelectorOpIn, Values: values,
	}}}
}

func (labelsPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	// Any resource may carry the labels; the selectors let only labelled
	// objects through.
	del := b.Webhook("deletion.rampart.io", DeletionPath, rule(admissionregistrationv1.Delete, "*", "*"))
	del.ObjectSelector = labelled(v1alpha1.LabelProtection, string(v1alpha1.ProtectionAlways), string(v1alpha1.ProtectionCascading))
	upd := b.Webhook("replicas.rampart.io", ReplicasPath, rule(admissionregistrationv1.Update, "*", "*"))
	upd.ObjectSelector = labelled(v1alpha1.LabelExplicitReplicas, "true")
	if reg.CompiledLabels {
		// The API server enforces Always itself, and the replicas of
		// built-in workloads that already carry the label.
		del.ObjectSelector = labelled(v1alpha1.LabelProtection, string(v1alpha1.ProtectionCascading))
		upd.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-compiled", Expression: notCompiledReplicas}}
	}
	// A workload created with the label gets its scale subresource guarded
	// before the creation is admitted. Pods copied from a labelled
	// template never reach Rampart: the API server's match condition
	// leaves them out.
	created := b.Webhook("created.replicas.rampart.io", ReplicasPath, rule(admissionregistrationv1.Create, "*", "*"))
	created.ObjectSelector = labelled(v1alpha1.LabelExplicitReplicas, "true")
	upd.TimeoutSeconds, created.TimeoutSeconds = ptr.To(inForceTimeout), ptr.To(inForceTimeout)
	created.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name: "not-pods", Expression: `!(request.resource.group == "" && request.resource.resource == "pods")`,
	}}
	return own(Owner{}, del, upd, created)
}

// notCompiledReplicas leaves out the updates a compiled policy judges: a
// built-in workload that carried the explicit-replicas label before the
// write. A workload gaining the label still reaches Rampart, which puts its
// scale subresource in force before admitting it.
var notCompiledReplicas = func() string {
	var names []string
	for _, gr := range compiled.Workloads {
		names = append(names, strconv.Quote(gr.Group+"/"+gr.Resource))
	}
	return `!([request.resource.group, request.resource.resource].join("/") in [` + strings.Join(names, ", ") + `] && ` +
		`has(oldObject.metadata.labels) && "` + v1alpha1.LabelExplicitReplicas + `" in oldObject.metadata.labels && ` +
		`oldObject.metadata.labels["` + v1alpha1.LabelExplicitReplicas + `"] == "true")`
}()
