package admission

import (
	"context"
	"net/http"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/budget"
)

// A Protection is one kind of protection as the API server sees it: the
// handlers it serves and the webhooks that send requests to them. It plays
// the part of k8s.io/apiserver's admission.Interface (Handles) and
// OpenKruise's HandlerGetterMap, split so that the webhook configuration
// is made from every protection's Webhooks and the webhook server from
// every protection's Routes. Adding a protection is a value here and one
// line in Plugins.
type Protection interface {
	// Name names the protection (logs, docs).
	Name() string
	// Routes are the handlers it serves, built from what the manager has.
	Routes(Deps) []Route
	// Webhooks are the webhooks reg needs for it, each with its owner.
	Webhooks(Registration, Builder) []Webhook
}

// Plugins are every protection, in the order of their webhooks in the
// configuration.
var Plugins = []Protection{
	labelsPlugin{}, policyPlugin{}, windowPlugin{}, flowControlPlugin{}, budgetPlugin{},
	objectsPlugin{}, scalePlugin{}, generatedBudgetPlugin{}, probePlugin{}, recyclePlugin{},
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

// Owners of the kinds whose objects get webhooks of their own.
func PolicyOwner(name string) Owner { return Owner{Kind: "ProtectionPolicy", Name: name} }

// WindowOwner is the owner of a ChangeWindow's webhook.
func WindowOwner(ns, name string) Owner {
	return Owner{Kind: "ChangeWindow", Namespace: ns, Name: name}
}

// FlowControlOwner is the owner of a DeletionFlowControl's webhook.
func FlowControlOwner(name string) Owner { return Owner{Kind: "DeletionFlowControl", Name: name} }

// RecycleOwner is the owner of a RecyclePolicy's webhook.
func RecycleOwner(name string) Owner { return Owner{Kind: "RecyclePolicy", Name: name} }

// Webhook is a validating webhook with its owner.
type Webhook struct {
	Owner Owner
	admissionregistrationv1.ValidatingWebhook
}

// own tags hooks with owner.
func own(owner Owner, hooks ...admissionregistrationv1.ValidatingWebhook) []Webhook {
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

func newBuilder(reg Registration) Builder {
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

// Deps are what the manager gives the protections' handlers.
type Deps struct {
	// Cache reads from the manager's informers; Direct reads and writes
	// the API server.
	Cache  client.Reader
	Direct client.Client
	// InForce registers what a request brings before it is admitted.
	InForce interface {
		InForce
		BudgetNamespace(ctx context.Context, ns string) error
	}
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
	Namespaces               interface{ NamespaceTerminating(string) bool }
	Scales                   Scales
	// ReplicasExempt and LiveLabels: see Replicas.
	ReplicasExempt v1alpha1.Subjects
	LiveLabels     func(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (map[string]string, bool, error)
	// Bin keeps a copy of each protected object before its delete is
	// admitted; nil when the recycle bin is off.
	Bin Capturer
}

func (d Deps) deletion() *Deletion {
	return &Deletion{View: d.Deletion, Policies: d.Policies, Recorder: d.Recorder, Mapper: d.Mapper, Bin: d.Bin}
}

func (d Deps) replicas() *Replicas {
	return &Replicas{View: d.ScaleTargets, Policies: d.Policies, Exempt: d.ReplicasExempt, Recorder: d.Recorder,
		InForce: d.InForce, LiveLabels: d.LiveLabels, Mapper: d.Mapper}
}

// Routes are every protection's handlers.
func Routes(d Deps) []Route {
	var out []Route
	for _, p := range Plugins {
		out = append(out, p.Routes(d)...)
	}
	return out
}

// Webhooks are every protection's webhooks for reg, in the order of
// Plugins, before they are spread over local replicas.
func Webhooks(reg Registration) []Webhook {
	b := newBuilder(reg)
	var out []Webhook
	for _, p := range Plugins {
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
