package admit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
	objects "github.com/rampart-io/rampart/internal/protection/objects/admit"
)

// AnnotationGeneratedFor, on a generated PodUnavailableBudget, names the
// workload ("Kind/name") it was generated for. A budget generated while
// its workload was being created has no owner yet (the workload has no UID
// before it is stored): the controller adopts it, or deletes it if the
// workload never comes.
const AnnotationGeneratedFor = "rampart.io/generated-for"

// GeneratedWebhookName admits workloads asking for a generated budget.
const GeneratedWebhookName = "generated.budgets.rampart.io"

// generatePUBCondition is the match condition that lets only workloads
// asking for a generated budget reach the webhook (annotations cannot be
// selected on).
const generatePUBCondition = `has(object.metadata.annotations) && "` + v1alpha1.AnnotationGeneratePUB +
	`" in object.metadata.annotations && object.metadata.annotations["` + v1alpha1.AnnotationGeneratePUB + `"] == "true"`

// GeneratedBudgets admits a workload annotated rampart.io/generate-pub only
// once its budget exists: the request that asks for the budget creates it
// (and that creation waits until the budget is enforced, see
// BudgetAdmission), so the budget holds from the moment the annotation is
// accepted. The controller keeps it sized and owned afterwards.
type GeneratedBudgets struct {
	// Client reads and creates budgets directly.
	Client client.Client
}

// Handle implements admission.Handler.
func (h *GeneratedBudgets) Handle(ctx context.Context, req admission.Request) admission.Response {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) || req.SubResource != "" || rampartadmission.DryRun(req) {
		return admission.Allowed("")
	}
	var (
		meta    metav1.ObjectMeta
		rolling *intstr.IntOrString
	)
	switch req.Kind.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := json.Unmarshal(req.Object.Raw, &d); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		meta = d.ObjectMeta
		if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
			rolling = ru.MaxUnavailable
		}
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := json.Unmarshal(req.Object.Raw, &s); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		meta = s.ObjectMeta
		if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil {
			rolling = ru.MaxUnavailable
		}
	default:
		return admission.Allowed("")
	}
	if meta.Annotations[v1alpha1.AnnotationGeneratePUB] != "true" || meta.DeletionTimestamp != nil {
		return admission.Allowed("")
	}
	kind, name := req.Kind.Kind, req.Name
	if name == "" {
		name = meta.Name
	}
	spec, err := budget.GeneratedSpec(meta.Annotations, rolling)
	if err != nil {
		return admission.Denied(fmt.Sprintf("%s %s/%s asks for a generated PodUnavailableBudget (%s): %v",
			kind, req.Namespace, name, v1alpha1.AnnotationGeneratePUB, err))
	}
	existing := &v1alpha1.PodUnavailableBudget{}
	err = h.Client.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: name}, existing)
	if err == nil {
		return admission.Allowed("") // the controller keeps it sized, or reports a budget it does not own
	}
	if !apierrors.IsNotFound(err) {
		return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("reading PodUnavailableBudget %s/%s: %w", req.Namespace, name, err))
	}
	pub := GeneratedBudget(req.Namespace, kind, name, spec)
	// Owned only by a workload already stored. A workload being created
	// has its UID here (validating admission runs after the API server
	// assigns it) but is not stored yet: the garbage collector, seeing
	// the budget's owner missing, would delete the budget at once (seen:
	// 7 ms after its creation). The controller adopts it once the
	// workload is stored (generatedbudgets.adoptable).
	if meta.UID != "" && req.Operation == admissionv1.Update {
		pub.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: meta.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}}
	}
	if err := h.Client.Create(ctx, pub); err != nil && !apierrors.IsAlreadyExists(err) {
		return admission.Errored(http.StatusServiceUnavailable,
			fmt.Errorf("%s %s/%s is not stored: its generated PodUnavailableBudget could not be created (%w); retry", kind, req.Namespace, name, err))
	}
	return admission.Allowed("")
}

// GeneratedBudget is the budget generated for a workload, without owner:
// spec (see budget.GeneratedSpec) with the workload as its target.
func GeneratedBudget(ns, kind, name string, spec v1alpha1.PodUnavailableBudgetSpec) *v1alpha1.PodUnavailableBudget {
	spec.TargetRef = &v1alpha1.TargetReference{APIVersion: "apps/v1", Kind: kind, Name: name}
	return &v1alpha1.PodUnavailableBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "rampart"},
			Annotations: map[string]string{AnnotationGeneratedFor: kind + "/" + name}},
		Spec: spec,
	}
}

// GeneratedPlugin admits workloads annotated rampart.io/generate-pub once
// their budget exists (served by the objects webhook).
type GeneratedPlugin struct {
	rampartadmission.WantsDirect
}

func (*GeneratedPlugin) Name() string { return "generatedbudget" }

func (*GeneratedPlugin) Routes() []rampartadmission.Route { return nil }

// ObjectHandlers: the workloads its webhook sends to the objects webhook.
func (p *GeneratedPlugin) ObjectHandlers() map[string]admission.Handler {
	generated := &GeneratedBudgets{Client: p.Direct}
	return map[string]admission.Handler{"deployments": generated, "statefulsets": generated}
}

// ObjectRules are none: its own webhook sends the workloads there.
func (*GeneratedPlugin) ObjectRules() []admissionregistrationv1.RuleWithOperations { return nil }

func (*GeneratedPlugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	if !reg.GeneratedBudgets {
		return nil
	}
	// Only workloads asking for a generated budget pass the match
	// condition: annotations cannot be selected on.
	workloads := rampartadmission.Rule(admissionregistrationv1.Create, "apps", "deployments")
	workloads.Operations = append(workloads.Operations, admissionregistrationv1.Update)
	workloads.Resources = append(workloads.Resources, "statefulsets")
	workloads.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
	gen := b.Webhook(GeneratedWebhookName, objects.ObjectsPath, workloads)
	gen.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "generate-pub", Expression: generatePUBCondition}}
	gen.TimeoutSeconds = ptr.To(rampartadmission.InForceTimeout)
	return rampartadmission.Own(rampartadmission.Owner{}, gen)
}
