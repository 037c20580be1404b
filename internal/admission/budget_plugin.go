package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

// budgetPlugin is the protection PodUnavailableBudgets give: disruptions
// and evictions of every pod of a namespace holding budgets are judged.
type budgetPlugin struct{}

func (budgetPlugin) Name() string { return "podunavailablebudget" }

func (budgetPlugin) Routes(d Deps) []Route {
	return []Route{{Path: BudgetPath, Handler: &Budgets{Client: d.Direct, Cache: d.Cache, Index: d.BudgetIndex, Pods: d.Pods,
		Namespaces: d.Namespaces, Recorder: d.Recorder, Targets: d.Scales, Nodes: d.Nodes, PartitionThreshold: d.BudgetPartitionThreshold, Owners: d.Owners}}}
}

func (budgetPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if len(reg.BudgetNamespaces) == 0 {
		return nil
	}
	// Every pod there: a pod's labels say which budget covers it, and the
	// handler reads them from the request, so nothing needs writing on the
	// pod first. An Eviction carries no labels to select on.
	pub := b.Webhook(BudgetsWebhookName, BudgetPath,
		rule(admissionregistrationv1.Delete, "", "pods"), rule(admissionregistrationv1.Update, "", "pods"),
		rule(admissionregistrationv1.Update, "", "pods/resize"))
	pub.NamespaceSelector = inNamespaces(reg.BudgetNamespaces)
	pub.TimeoutSeconds = ptr.To(int32(10))
	evict := b.Webhook(EvictionWebhookName, BudgetPath, rule(admissionregistrationv1.Create, "", "pods/eviction"))
	evict.NamespaceSelector = inNamespaces(reg.BudgetNamespaces)
	evict.TimeoutSeconds = ptr.To(int32(10))
	return own(Owner{}, pub, evict)
}
