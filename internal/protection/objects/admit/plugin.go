// Package admit is the objects protection as the API server sees it: the
// admission of Rampart's own objects. The cluster-scoped kinds whose
// webhooks must be in force first go to the spec webhook (SpecPath); the
// namespaced ones, and what the protections that implement AdmitsObjects
// admit, go to the objects webhook (ObjectsPath), dispatched by resource.
package admit

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// Plugin admits Rampart's own objects: ChangeWindows (what CEL cannot
// check), the cluster-scoped kinds whose webhooks must be in force first
// (rampartadmission.Spec), and what the protections that implement
// AdmitsObjects admit (new PodUnavailableBudgets once the budget webhooks
// reach their namespace, workloads asking for a generated budget).
type Plugin struct {
	rampartadmission.WantsInForce
	rampartadmission.WantsKinds
	rampartadmission.WantsProtections
}

// AdmitsObjects is a protection that admits objects through the objects
// webhook (ObjectsPath): the handler of each resource it admits, and the
// rules it adds to that webhook (none when a webhook of its own sends the
// requests there).
type AdmitsObjects interface {
	ObjectHandlers() map[string]admission.Handler
	ObjectRules() []admissionregistrationv1.RuleWithOperations
}

// ConditionsObjects is an AdmitsObjects protection that narrows, by match
// conditions, which of the requests its rules send reach the objects
// webhook. Every condition must hold for any request to reach it: each
// must be true of the requests of the other protections.
type ConditionsObjects interface {
	ObjectMatchConditions() []admissionregistrationv1.MatchCondition
}

func (*Plugin) Name() string { return "objects" }

// ObjectsPath admits Rampart's own objects, by resource: the namespaced
// kinds' spec and what AdmitsObjects protections admit.
const ObjectsPath = "/validate/objects"

// SpecPath judges the creation and change of the cluster-scoped kinds
// that register webhooks of their own (ProtectionPolicies,
// DeletionFlowControls, RecyclePolicies): admitted once their webhooks
// are in force.
const SpecPath = "/validate/spec"

// Objects dispatches admission of Rampart's own objects by resource.
type Objects map[string]admission.Handler

// Handle implements admission.Handler.
func (o Objects) Handle(ctx context.Context, req admission.Request) admission.Response {
	if h, ok := o[req.Resource.Resource]; ok {
		return h.Handle(ctx, req)
	}
	return admission.Allowed("")
}

func (p *Plugin) Routes() []rampartadmission.Route {
	kinds := p.Kinds
	spec := rampartadmission.Spec{InForce: p.InForce, Kinds: kinds}
	objects := Objects{}
	for _, a := range rampartadmission.Declared(p.Protections, AdmitsObjects.ObjectHandlers) {
		for resource, h := range a {
			objects[resource] = h
		}
	}
	for _, k := range kinds {
		if k.Namespaced {
			objects[k.Resource] = spec
		}
	}
	return []rampartadmission.Route{{Path: ObjectsPath, Handler: objects}, {Path: SpecPath, Handler: spec}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	kinds := rampartadmission.Kinds(reg.Protections)
	rules := []admissionregistrationv1.RuleWithOperations{kindsRule(kinds, true, admissionregistrationv1.Create, admissionregistrationv1.Update)}
	for _, r := range rampartadmission.Declared(reg.Protections, AdmitsObjects.ObjectRules) {
		rules = append(rules, r...)
	}
	objects := b.Webhook("objects.rampart.io", ObjectsPath, rules...)
	objects.TimeoutSeconds = ptr.To(rampartadmission.InForceTimeout)
	for _, c := range rampartadmission.Declared(reg.Protections, ConditionsObjects.ObjectMatchConditions) {
		objects.MatchConditions = append(objects.MatchConditions, c...)
	}
	return rampartadmission.Own(rampartadmission.Owner{}, objects, specWebhook(b, kinds))
}

// specWebhook reaches CREATE and UPDATE of the cluster-scoped kinds whose
// webhooks Rampart registers. Failing closed means: with Rampart down, no
// policy or flow control can be created or changed (it could not be
// enforced either).
func specWebhook(b rampartadmission.Builder, kinds []rampartadmission.ObjectKind) admissionregistrationv1.ValidatingWebhook {
	h := b.Webhook("spec.rampart.io", SpecPath, kindsRule(kinds, false, admissionregistrationv1.Create, admissionregistrationv1.Update))
	h.TimeoutSeconds = ptr.To(rampartadmission.InForceTimeout)
	return h
}

// kindsRule reaches ops of the kinds of one scope.
func kindsRule(kinds []rampartadmission.ObjectKind, namespaced bool, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	var resources []string
	for _, k := range kinds {
		if k.Namespaced == namespaced {
			resources = append(resources, k.Resource)
		}
	}
	scope := admissionregistrationv1.ClusterScope
	if namespaced {
		scope = admissionregistrationv1.NamespacedScope
	}
	return admissionregistrationv1.RuleWithOperations{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
			Resources: resources, Scope: ptr.To(scope)}}
}
