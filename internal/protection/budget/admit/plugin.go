package admit

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Plugin is the protection PodUnavailableBudgets give: disruptions
// and evictions of every pod of a namespace holding budgets are judged.
type Plugin struct {
	rampartadmission.WantsDirect
	rampartadmission.WantsCache
	rampartadmission.WantsPods
	rampartadmission.WantsRecorder
	rampartadmission.WantsNodes
	rampartadmission.WantsBudgets
	rampartadmission.WantsInForce
}

// NamespaceKeys is the key set of the namespaces holding budgets.
const NamespaceKeys = "budgets"

// EvictionWebhookName judges evictions in namespaces holding budgets.
const EvictionWebhookName = "evictions.budgets.rampart.io"

// WebhookName judges disruptions of pods in namespaces holding budgets.
const WebhookName = "budgets.rampart.io"

func (*Plugin) Name() string { return "podunavailablebudget" }

// Keys are the namespaces holding budgets, from the budget index.
func (p *Plugin) Keys() rampartadmission.KeySet {
	if p.BudgetIndex == nil {
		return rampartadmission.KeySet{Name: NamespaceKeys}
	}
	return rampartadmission.KeySet{Name: NamespaceKeys, HasSynced: p.BudgetsSynced,
		All: func(rampartadmission.Registration) []string { return p.BudgetIndex.Namespaces() }}
}

func (p *Plugin) Routes() []rampartadmission.Route {
	var fence *Fence
	var marks *Marks
	if p.BudgetIndex != nil && p.BudgetIndex.Fence().Name != "" {
		fence = &Fence{Client: p.Direct, Index: p.BudgetIndex}
		marks = &Marks{Client: p.Direct, Index: p.BudgetIndex}
	}
	return []rampartadmission.Route{{Path: Path, Handler: &Budgets{Client: p.Direct, Cache: p.Cache, Index: p.BudgetIndex, Pods: p.Pods,
		Namespaces: p.Namespaces, Recorder: p.Recorder, Targets: p.Scales, Nodes: p.Nodes, PartitionThreshold: p.PartitionThreshold, Owners: p.Owners,
		Marks: marks, Fence: fence}}}
}

// ObjectHandlers: a new budget is admitted once the budget webhooks reach
// its namespace, and a creation or change of a budget's spec once it is
// marked.
func (p *Plugin) ObjectHandlers() map[string]admission.Handler {
	var marks *Marks
	if p.BudgetIndex != nil {
		marks = &Marks{Client: p.Direct, Index: p.BudgetIndex}
	}
	return map[string]admission.Handler{"podunavailablebudgets": &BudgetAdmission{InForce: p.InForce, Index: p.BudgetIndex, Marks: marks}}
}

// ObjectRules send the creations of budgets, and the changes of their
// spec (ObjectMatchConditions), to the objects webhook.
func (*Plugin) ObjectRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: []string{"podunavailablebudgets"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
}

// ObjectMatchConditions let through to the objects webhook only the
// updates of budgets that change their spec (a new generation): the
// garbage collector's and other metadata-only writes never wait on
// Rampart, nor fail while it is down.
func (*Plugin) ObjectMatchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{{Name: "budget-spec-changes",
		Expression: `request.operation != "UPDATE" || request.resource.group != "` + v1alpha1.GroupVersion.Group +
			`" || request.resource.resource != "podunavailablebudgets" || object.metadata.generation != oldObject.metadata.generation`}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	namespaces := reg.Keys[NamespaceKeys]
	if len(namespaces) == 0 {
		return nil
	}
	// Every pod there: a pod's labels say which budget covers it, and the
	// handler reads them from the request, so nothing needs writing on the
	// pod first. An Eviction carries no labels to select on.
	pub := b.Webhook(WebhookName, Path,
		rampartadmission.Rule(admissionregistrationv1.Delete, "", "pods"), rampartadmission.Rule(admissionregistrationv1.Update, "", "pods"),
		rampartadmission.Rule(admissionregistrationv1.Update, "", "pods/resize"))
	pub.NamespaceSelector = rampartadmission.InNamespaces(namespaces)
	pub.TimeoutSeconds = ptr.To(int32(10))
	evict := b.Webhook(EvictionWebhookName, Path, rampartadmission.Rule(admissionregistrationv1.Create, "", "pods/eviction"))
	evict.NamespaceSelector = rampartadmission.InNamespaces(namespaces)
	evict.TimeoutSeconds = ptr.To(int32(10))
	return rampartadmission.Own(rampartadmission.Owner{}, pub, evict)
}
