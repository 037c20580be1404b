package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// A protection asks for what its handlers read by embedding the Wants
// types below, and Initialize gives it exactly that: k8s.io/apiserver's
// WantsX initializers (WantsExternalKubeClientSet, …), made by embedding
// so that asking is one line and no protection sees the rest. The raw
// cache and the direct client go only to the protections that read or
// write objects themselves (a ledger's, a window's live read).

// WantsCache reads from the manager's informers.
type WantsCache struct{ Cache client.Reader }

// WantsDirect reads and writes the API server (a ledger's writes).
type WantsDirect struct{ Direct client.Client }

// WantsInForce puts what a request brings in force before it is admitted.
type WantsInForce struct{ InForce InForce }

// WantsRecorder records Events.
type WantsRecorder struct{ Recorder events.EventRecorder }

// WantsMapper maps kinds and resources.
type WantsMapper struct{ Mapper meta.RESTMapper }

// WantsPolicies reads ProtectionPolicies.
type WantsPolicies struct{ Policies Policies }

// WantsDeletionView counts what a delete would take with it.
type WantsDeletionView struct{ Deletion DeletionView }

// WantsScaleTargets knows which workloads' scale subresource is guarded.
type WantsScaleTargets struct{ ScaleTargets ScaleTargetsView }

// WantsPods reads cached pods' labels and owners.
type WantsPods struct{ Pods PodLabels }

// WantsNodes reads node health, and the share of NotReady nodes that is a
// partition.
type WantsNodes struct {
	Nodes              NodeHealth
	PartitionThreshold float64
}

// WantsBudgets reads the budgets, their targets, the owners of pods and
// namespaces.
type WantsBudgets struct {
	BudgetIndex *budget.Index
	Scales      Scales
	Owners      OwnerView
	Namespaces  interface{ NamespaceTerminating(string) bool }
	// BudgetsSynced says whether the budget index holds the whole cluster.
	BudgetsSynced func() bool
}

// WantsReplicas reads who may change replicas without confirming, and a
// workload's labels live.
type WantsReplicas struct {
	ReplicasExempt v1alpha1.Subjects
	LiveLabels     func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error)
}

// WantsScaleKeys lists the workloads whose scale subresource a label or
// a policy guards.
type WantsScaleKeys struct{ ScaleKeys ScaleKeys }

// ScaleKeys is the view behind the scale protection's key set
// (clusterview.ScaleTargets).
type ScaleKeys interface {
	Targets(policies []v1alpha1.ProtectionPolicy) []string
	HasSynced() bool
	Changes() <-chan struct{}
}

// WantsCompiledPolicies knows how ProtectionPolicies' static rules stand
// (compiled to ValidatingAdmissionPolicies, in force), and follows the
// CRDs they depend on: OnCRDChange registers a function called after any
// CRD is added, changed or deleted. Either may be nil (not compiled, not
// followed).
type WantsCompiledPolicies struct {
	CompiledPolicies CompiledPolicies
	OnCRDChange      func(func())
}

// WantsKinds knows every protection's kinds of object.
type WantsKinds struct{ Kinds []ObjectKind }

// WantsBin keeps a copy of each object before its delete is admitted.
type WantsBin struct{ Bin Capturer }

// WantsNamespaceContents keeps what the namespace controller deletes in a
// protected namespace, up to MaxBytes a namespace, and reads namespaces'
// labels and whether they are being deleted.
type WantsNamespaceContents struct {
	Namespaces NamespaceView
	MaxBytes   int64
}

// NamespaceView is a namespace's labels and deletion
// (clusterview.Namespaces).
type NamespaceView interface {
	// NamespaceLabels are a namespace's labels; ok is false if it is unknown.
	NamespaceLabels(ns string) (map[string]string, bool)
	NamespaceTerminating(ns string) bool
}

// WantsProtections knows every protection, initialized (a protection
// serving what others declare).
type WantsProtections struct{ Protections []Protection }

// WantsInstalledBy knows how the manager was installed (what a message
// says to change a setting).
type WantsInstalledBy struct{ InstalledBy installation.Method }

func (w *WantsCache) giveCache(d Deps)               { w.Cache = d.Cache }
func (w *WantsDirect) giveDirect(d Deps)             { w.Direct = d.Direct }
func (w *WantsInForce) giveInForce(d Deps)           { w.InForce = d.InForce }
func (w *WantsRecorder) giveRecorder(d Deps)         { w.Recorder = d.Recorder }
func (w *WantsMapper) giveMapper(d Deps)             { w.Mapper = d.Mapper }
func (w *WantsPolicies) givePolicies(d Deps)         { w.Policies = d.Policies }
func (w *WantsDeletionView) giveDeletion(d Deps)     { w.Deletion = d.Deletion }
func (w *WantsScaleTargets) giveScaleTargets(d Deps) { w.ScaleTargets = d.ScaleTargets }
func (w *WantsPods) givePods(d Deps)                 { w.Pods = d.Pods }
func (w *WantsNodes) giveNodes(d Deps) {
	w.Nodes, w.PartitionThreshold = d.Nodes, d.BudgetPartitionThreshold
}
func (w *WantsBudgets) giveBudgets(d Deps) {
	w.BudgetIndex, w.Scales, w.Owners, w.Namespaces, w.BudgetsSynced = d.BudgetIndex, d.Scales, d.Owners, d.Namespaces, d.BudgetsSynced
}
func (w *WantsReplicas) giveReplicas(d Deps) {
	w.ReplicasExempt, w.LiveLabels = d.ReplicasExempt, d.LiveLabels
}
func (w *WantsCompiledPolicies) giveCompiledPolicies(d Deps) {
	w.CompiledPolicies, w.OnCRDChange = d.CompiledPolicies, d.OnCRDChange
}
func (w *WantsKinds) giveKinds(d Deps) { w.Kinds = d.Kinds }
func (w *WantsBin) giveBin(d Deps)     { w.Bin = d.Bin }
func (w *WantsNamespaceContents) giveNamespaceContents(d Deps) {
	w.Namespaces, w.MaxBytes = d.Namespaces, d.NamespaceContentsMax
}
func (w *WantsScaleKeys) giveScaleKeys(d Deps)     { w.ScaleKeys = d.ScaleKeys }
func (w *WantsProtections) giveProtections(d Deps) { w.Protections = d.Protections }
func (w *WantsInstalledBy) giveInstalledBy(d Deps) { w.InstalledBy = d.InstalledBy }

// initializers give each protection what it embeds.
var initializers = []func(Protection, Deps){
	func(p Protection, d Deps) { call(p, func(w interface{ giveCache(Deps) }) { w.giveCache(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveDirect(Deps) }) { w.giveDirect(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveInForce(Deps) }) { w.giveInForce(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveRecorder(Deps) }) { w.giveRecorder(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveMapper(Deps) }) { w.giveMapper(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ givePolicies(Deps) }) { w.givePolicies(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveDeletion(Deps) }) { w.giveDeletion(d) }) },
	func(p Protection, d Deps) {
		call(p, func(w interface{ giveScaleTargets(Deps) }) { w.giveScaleTargets(d) })
	},
	func(p Protection, d Deps) { call(p, func(w interface{ givePods(Deps) }) { w.givePods(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveNodes(Deps) }) { w.giveNodes(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveBudgets(Deps) }) { w.giveBudgets(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveReplicas(Deps) }) { w.giveReplicas(d) }) },
	func(p Protection, d Deps) { call(p, func(w interface{ giveBin(Deps) }) { w.giveBin(d) }) },
	func(p Protection, d Deps) {
		call(p, func(w interface{ giveNamespaceContents(Deps) }) { w.giveNamespaceContents(d) })
	},
	func(p Protection, d Deps) { call(p, func(w interface{ giveKinds(Deps) }) { w.giveKinds(d) }) },
	func(p Protection, d Deps) {
		call(p, func(w interface{ giveCompiledPolicies(Deps) }) { w.giveCompiledPolicies(d) })
	},
	func(p Protection, d Deps) { call(p, func(w interface{ giveScaleKeys(Deps) }) { w.giveScaleKeys(d) }) },
	func(p Protection, d Deps) {
		call(p, func(w interface{ giveInstalledBy(Deps) }) { w.giveInstalledBy(d) })
	},
	func(p Protection, d Deps) {
		call(p, func(w interface{ giveProtections(Deps) }) { w.giveProtections(d) })
	},
}

// call calls give with p if p wants what W gives.
func call[W any](p Protection, give func(W)) {
	if w, ok := p.(W); ok {
		give(w)
	}
}

// Initialize gives each protection what it asked for, and returns them.
func Initialize(ps []Protection, d Deps) []Protection {
	d.Kinds, d.Protections = Kinds(ps), ps
	for _, p := range ps {
		for _, init := range initializers {
			init(p, d)
		}
	}
	return ps
}
