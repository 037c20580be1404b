package admission

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// ObjectsPlugin admits Rampart's own objects: ChangeWindows (what CEL
// cannot check), the cluster-scoped kinds whose webhooks must be in force
// first (spec), and what the protections that implement AdmitsObjects
// admit (new PodUnavailableBudgets once the budget webhooks reach their
// namespace, workloads asking for a generated budget).
type ObjectsPlugin struct {
	WantsInForce
	WantsKinds
	WantsProtections
}

// AdmitsObjects is a protection that admits objects through the objects
// webhook (ObjectsPath): the handler of each resource it admits, and the
// rules it adds to that webhook (none when a webhook of its own sends the
// requests there).
type AdmitsObjects interface {
	ObjectHandlers() map[string]admission.Handler
	ObjectRules() []admissionregistrationv1.RuleWithOperations
}

func (*ObjectsPlugin) Name() string { return "objects" }

// ObjectsPath admits Rampart's own objects, by resource: the namespaced
// kinds' spec and what AdmitsObjects protections admit.
const ObjectsPath = "/validate/objects"

// Objects dispatches admission of Rampart's own objects by resource.
type Objects map[string]admission.Handler

// Handle implements admission.Handler.
func (o Objects) Handle(ctx context.Context, req admission.Request) admission.Response {
	if h, ok := o[req.Resource.Resource]; ok {
		return h.Handle(ctx, req)
	}
	return admission.Allowed("")
}

func (p *ObjectsPlugin) Routes() []Route {
	kinds := p.Kinds
	spec := Spec{InForce: p.InForce, Kinds: kinds}
	objects := Objects{}
	for _, a := range declared(p.Protections, AdmitsObjects.ObjectHandlers) {
		for resource, h := range a {
			objects[resource] = h
		}
	}
	for _, k := range kinds {
		if k.Namespaced {
			objects[k.Resource] = spec
		}
	}
	return []Route{{Path: ObjectsPath, Handler: objects}, {Path: SpecPath, Handler: spec}}
}

func (*ObjectsPlugin) Webhooks(reg Registration, b Builder) []Webhook {
	kinds := Kinds(reg.Protections)
	rules := []admissionregistrationv1.RuleWithOperations{kindsRule(kinds, true, admissionregistrationv1.Create, admissionregistrationv1.Update)}
	for _, r := range declared(reg.Protections, AdmitsObjects.ObjectRules) {
		rules = append(rules, r...)
	}
	spec := b.Webhook("objects.rampart.io", ObjectsPath, rules...)
	spec.TimeoutSeconds = ptr.To(InForceTimeout)
	return Own(Owner{}, spec, specWebhook(b, kinds))
}

// ProbePlugin is the Barrier's probe: a fresh webhook per version of the
// configuration.
type ProbePlugin struct{}

func (*ProbePlugin) Name() string { return "probe" }

func (*ProbePlugin) Routes() []Route { return []Route{{Path: ProbePath, Handler: Probe{}}} }

func (*ProbePlugin) Webhooks(reg Registration, b Builder) []Webhook {
	if reg.Token == "" {
		return nil
	}
	return Own(Owner{}, probeWebhook(reg, b.Webhook))
}
