package admission

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
)

// BudgetPlugin is the protection PodUnavailableBudgets give: disruptions
// and evictions of every pod of a namespace holding budgets are judged.
type BudgetPlugin struct {
	WantsDirect
	WantsCache
	WantsPods
	WantsRecorder
	WantsNodes
	WantsBudgets
}

// BudgetNamespaceKeys is the key set of the namespaces holding budgets.
const BudgetNamespaceKeys = "budgets"

func (*BudgetPlugin) Name() string { return "podunavailablebudget" }

// Keys are the namespaces holding budgets, from the budget index.
func (p *BudgetPlugin) Keys() KeySet {
	if p.BudgetIndex == nil {
		return KeySet{Name: BudgetNamespaceKeys}
	}
	return KeySet{Name: BudgetNamespaceKeys, HasSynced: p.BudgetsSynced,
		Cached: func() []string { return p.BudgetIndex.Namespaces() }}
}

func (p *BudgetPlugin) Routes() []Route {
	return []Route{{Path: BudgetPath, Handler: &Budgets{Client: p.Direct, Cache: p.Cache, Index: p.BudgetIndex, Pods: p.Pods,
		Namespaces: p.Namespaces, Recorder: p.Recorder, Targets: p.Scales, Nodes: p.Nodes, PartitionThreshold: p.PartitionThreshold, Owners: p.Owners}}}
}

func (*BudgetPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	namespaces := reg.Keys[BudgetNamespaceKeys]
	if len(namespaces) == 0 {
		return nil
	}
	// Every pod there: a pod's labels say which budget covers it, and the
	// handler reads them from the request, so nothing needs writing on the
	// pod first. An Eviction carries no labels to select on.
	pub := b.Webhook(BudgetsWebhookName, BudgetPath,
		Rule(admissionregistrationv1.Delete, "", "pods"), Rule(admissionregistrationv1.Update, "", "pods"),
		Rule(admissionregistrationv1.Update, "", "pods/resize"))
	pub.NamespaceSelector = InNamespaces(namespaces)
	pub.TimeoutSeconds = ptr.To(int32(10))
	evict := b.Webhook(EvictionWebhookName, BudgetPath, Rule(admissionregistrationv1.Create, "", "pods/eviction"))
	evict.NamespaceSelector = InNamespaces(namespaces)
	evict.TimeoutSeconds = ptr.To(int32(10))
	return Own(Owner{}, pub, evict)
}
