// Package admit is the label protection as the API server sees it: the
// webhooks that send the deletes of objects labelled rampart.io/protection
// and the replica changes of workloads labelled
// rampart.io/explicit-replicas to the deletion and replicas handlers
// (internal/protection/admission), and what of them it leaves to the
// compiled policies. The decisions are internal/protection/deletion and
// internal/protection/replicas.
package admit

import (
	"fmt"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// Plugin is the protection of objects labelled rampart.io/protection and
// rampart.io/explicit-replicas: a deletion and a replicas webhook that
// reach only labelled objects, served by the handlers it shares with the
// ProtectionPolicies (admission.Guards).
type Plugin struct{ rampartadmission.Guards }

func (*Plugin) Name() string { return "labels" }

func (l *Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{{Path: rampartadmission.DeletionPath, Handler: l.DeletionHandler()},
		{Path: rampartadmission.ReplicasPath, Handler: l.ReplicasHandler()}}
}

func labelled(key string, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: key, Operator: metav1.LabelSelectorOpIn, Values: values,
	}}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	// Any resource may carry the labels; the selectors let only labelled
	// objects through.
	del := b.Webhook("deletion.rampart.io", rampartadmission.DeletionPath, rampartadmission.Rule(admissionregistrationv1.Delete, "*", "*"))
	del.ObjectSelector = labelled(v1alpha1.LabelProtection, string(v1alpha1.ProtectionAlways), string(v1alpha1.ProtectionCascading))
	upd := b.Webhook("replicas.rampart.io", rampartadmission.ReplicasPath, rampartadmission.Rule(admissionregistrationv1.Update, "*", "*"))
	upd.ObjectSelector = labelled(v1alpha1.LabelExplicitReplicas, "true")
	if reg.CompiledLabels {
		// The API server enforces Always itself, and the replicas of
		// built-in workloads that already carry the label.
		del.ObjectSelector = labelled(v1alpha1.LabelProtection, string(v1alpha1.ProtectionCascading))
		upd.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-compiled", Expression: notCompiledReplicas}}
		if len(reg.Scaled) > 0 {
			upd.MatchConditions = append(upd.MatchConditions, admissionregistrationv1.MatchCondition{Name: "not-confirmed", Expression: notConfirmedScaled(reg.Scaled)})
		}
	}
	// A workload created with the label gets its scale subresource guarded
	// before the creation is admitted. Pods copied from a labelled
	// template never reach Rampart: the API server's match condition
	// leaves them out.
	created := b.Webhook("created.replicas.rampart.io", rampartadmission.ReplicasPath, rampartadmission.Rule(admissionregistrationv1.Create, "*", "*"))
	created.ObjectSelector = labelled(v1alpha1.LabelExplicitReplicas, "true")
	upd.TimeoutSeconds, created.TimeoutSeconds = ptr.To(rampartadmission.InForceTimeout), ptr.To(rampartadmission.InForceTimeout)
	created.MatchConditions = []admissionregistrationv1.MatchCondition{{
		Name: "not-pods", Expression: `!(request.resource.group == "" && request.resource.resource == "pods")`,
	}}
	return rampartadmission.Own(rampartadmission.Owner{}, del, upd, created)
}

// notConfirmedScaled leaves out the confirmed replica changes of custom
// resources with a scale subresource that carried the explicit-replicas
// label before the write: the webhook admits them (a workload that
// already carried the label gains no guard), so leaving them to the
// compiled policies, which admit them too, takes nothing from the webhook
// and lets them through while Rampart is down. Every other change still
// reaches it. Each resource's replicas are read as its compiled policy
// reads them (the CRD's path, 1 when absent), and has() guards every
// field: a condition that fails to evaluate would refuse the request.
func notConfirmedScaled(scaled []compiled.ScaledResource) string {
	confirm := `(has(object.metadata.annotations) && "` + v1alpha1.AnnotationConfirmReplicas + `" in object.metadata.annotations ? ` +
		`object.metadata.annotations["` + v1alpha1.AnnotationConfirmReplicas + `"] : "")`
	var byResource []string
	for _, s := range scaled {
		byResource = append(byResource, fmt.Sprintf(`(request.resource.group == %q && request.resource.resource == %q && %s == string(%s))`,
			s.Resource.Group, s.Resource.Resource, confirm, s.ReplicasCEL("object")))
	}
	return `!(` + oldLabelled + ` && (` + strings.Join(byResource, " || ") + `))`
}

// oldLabelled: the object carried the explicit-replicas label before the
// write.
const oldLabelled = `has(oldObject.metadata.labels) && "` + v1alpha1.LabelExplicitReplicas + `" in oldObject.metadata.labels && ` +
	`oldObject.metadata.labels["` + v1alpha1.LabelExplicitReplicas + `"] == "true"`

// notCompiledReplicas leaves out the updates a compiled policy judges: a
// built-in workload that carried the explicit-replicas label before the
// write. A workload gaining the label still reaches Rampart, which puts its
// scale subresource in force before admitting it.
var notCompiledReplicas = func() string {
	var names []string
	for _, gr := range compiled.Workloads {
		names = append(names, strconv.Quote(gr.Group+"/"+gr.Resource))
	}
	return `!([request.resource.group, request.resource.resource].join("/") in [` + strings.Join(names, ", ") + `] && ` + oldLabelled + `)`
}()
