package admission

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	"github.com/rampart-io/rampart/internal/protection/budget"
)

// A Protection is one kind of protection as the API server sees it: the
// handlers it serves and the webhooks that send requests to them. It plays
// the part of k8s.io/apiserver's admission.Interface (Handles) and
// OpenKruise's HandlerGetterMap, split so that the webhook configuration
// is made from every protection's Webhooks and the webhook server from
// every protection's Routes. What its handlers read it asks for by
// embedding Wants types (wants.go); what its webhooks are made from it
// declares with OwnsObjects or OwnsKeys (inputs.go). Adding a protection
// is a package and one line in protections.All
// (internal/protection/protections).
type Protection interface {
	// Name names the protection (logs, docs).
	Name() string
	// Routes are the handlers it serves, built from what it asked for.
	Routes() []Route
	// Webhooks are the webhooks reg needs for it, each with its owner.
	Webhooks(Registration, Builder) []Webhook
}

// Kinds are the kinds of object the protections are made from, in the
// order of ps.
func Kinds(ps []Protection) []ObjectKind { return Declared(ps, OwnsObjects.Objects) }

// OwnsReady is a protection whose objects report whether their webhooks
// are in force: the manager runs the controller it makes (the generic one
// of internal/protection/ready, over its kind).
type OwnsReady interface {
	Ready(c client.Client, reg func() Registration) Controller
}

// OwnsCollectors is a protection that exports metrics read from its
// objects on each scrape: the manager registers its collectors.
type OwnsCollectors interface {
	Collectors(reader client.Reader) []prometheus.Collector
}

// Controller is a controller the manager runs on its leader.
type Controller interface {
	SetupWithManager(ctrl.Manager) error
}

// KeySets are the key sets the protections are scoped with.
func KeySets(ps []Protection) []KeySet { return Declared(ps, OwnsKeys.Keys) }

// Declared is what the protections of ps that declare it with I say.
func Declared[I, D any](ps []Protection, get func(I) D) []D {
	var out []D
	for _, p := range ps {
		if i, ok := p.(I); ok {
			out = append(out, get(i))
		}
	}
	return out
}

// Route is one handler a protection serves at Path (a prefix when it ends
// in "/": WithContext then reads the owner's name from the rest).
type Route struct {
	Path        string
	Handler     admission.Handler
	WithContext func(context.Context, *http.Request) context.Context
}

// Owner is the object a webhook is registered for: its Ready condition
// follows that webhook. The zero Owner is Rampart itself (webhooks every
// installation has).
type Owner struct {
	Kind, Namespace, Name string
}

// Webhook is a validating webhook with its owner.
type Webhook struct {
	Owner Owner
	admissionregistrationv1.ValidatingWebhook
}

// own tags hooks with owner.
func Own(owner Owner, hooks ...admissionregistrationv1.ValidatingWebhook) []Webhook {
	out := make([]Webhook, len(hooks))
	for i, h := range hooks {
		out[i] = Webhook{Owner: owner, ValidatingWebhook: h}
	}
	return out
}

// Builder makes webhooks with Rampart's defaults for one registration.
type Builder struct {
	reg Registration
	// NotOwn selects every namespace but Rampart's own.
	NotOwn *metav1.LabelSelector
}

// NewBuilder is the Builder of reg's webhooks.
func NewBuilder(reg Registration) Builder {
	return Builder{reg: reg, NotOwn: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{reg.OwnNamespace},
	}}}}
}

// Webhook is a webhook named name calling path for rules: failing closed,
// outside Rampart's namespace, every object.
func (b Builder) Webhook(name, path string, rules ...admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            b.reg.Endpoint.clientConfig(path, b.reg.CABundle),
		Rules:                   rules,
		NamespaceSelector:       b.NotOwn,
		ObjectSelector:          &metav1.LabelSelector{},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		TimeoutSeconds:          ptr.To(int32(5)),
		AdmissionReviewVersions: []string{"v1"},
	}
}

// Deps are what the manager has for the protections' handlers: each
// gets what it asks for (Initialize).
type Deps struct {
	// Cache reads from the manager's informers; Direct reads and writes
	// the API server.
	Cache  client.Reader
	Direct client.Client
	// InForce registers what a request brings before it is admitted.
	InForce  InForce
	Recorder events.EventRecorder
	Mapper   meta.RESTMapper
	Policies Policies
	// Views of the cluster each handler reads.
	Deletion     DeletionView
	ScaleTargets ScaleTargetsView
	Pods         PodLabels
	BudgetIndex  *budget.Index
	Nodes        NodeHealth
	Owners       OwnerView
	// BudgetPartitionThreshold: see Budgets.PartitionThreshold.
	BudgetPartitionThreshold float64
	Namespaces               NamespaceView
	Scales                   Scales
	// ReplicasExempt and LiveLabels: see Replicas.
	ReplicasExempt v1alpha1.Subjects
	LiveLabels     func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error)
	// Bin keeps a copy of each protected object before its delete is
	// admitted; nil when the recycle bin is off.
	Bin Capturer
	// NamespaceContentsMax is what the bin keeps of a protected
	// namespace's contents as the namespace controller deletes them, per
	// namespace (0: none).
	NamespaceContentsMax int64
	// Kinds are every protection's kinds, and Protections every
	// protection (Initialize sets them).
	Kinds       []ObjectKind
	Protections []Protection
	// ScaleKeys and BudgetsSynced: see WantsScaleKeys, WantsBudgets.
	ScaleKeys     ScaleKeys
	BudgetsSynced func() bool
	// CompiledPolicies and OnCRDChange: see WantsCompiledPolicies.
	CompiledPolicies CompiledPolicies
	OnCRDChange      func(func())
	// InstalledBy is how the manager was installed.
	InstalledBy installation.Method
}

// Routes are the handlers of ps.
func Routes(ps []Protection) []Route {
	var out []Route
	for _, p := range ps {
		out = append(out, p.Routes()...)
	}
	return out
}

// Webhooks are the webhooks of reg's protections, in their order, before
// they are spread over local replicas.
func Webhooks(reg Registration) []Webhook {
	b := NewBuilder(reg)
	var out []Webhook
	for _, p := range reg.Protections {
		out = append(out, p.Webhooks(reg, b)...)
	}
	return out
}

// OwnedWebhooks are the webhooks reg registers for owner, as the
// configuration holds them (one per local replica).
func OwnedWebhooks(reg Registration, owner Owner) []admissionregistrationv1.ValidatingWebhook {
	var hooks []admissionregistrationv1.ValidatingWebhook
	for _, w := range Webhooks(reg) {
		if w.Owner == owner {
			hooks = append(hooks, w.ValidatingWebhook)
		}
	}
	return spreadValidating(reg.Endpoint, hooks)
}

func spreadValidating(e Endpoint, hooks []admissionregistrationv1.ValidatingWebhook) []admissionregistrationv1.ValidatingWebhook {
	return spread(e, hooks, func(h *admissionregistrationv1.ValidatingWebhook) (*string, *string, *[]admissionregistrationv1.MatchCondition) {
		return &h.Name, h.ClientConfig.URL, &h.MatchConditions
	})
}
