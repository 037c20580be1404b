package admission

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// ValidatingConfigName is the name of Rampart's ValidatingWebhookConfiguration.
const ValidatingConfigName = "rampart-validating"

// Endpoint says how the API server reaches the webhook server: by URL
// (a local cluster, where the manager runs beside the API server) or by
// Service (in a cluster).
type Endpoint struct {
	// URLHost and Port make https://URLHost:Port/PATH.
	URLHost string
	Port    int
	// Service in Namespace, used when URLHost is empty.
	Service   string
	Namespace string
}

func (e Endpoint) clientConfig(path string, caBundle []byte) admissionregistrationv1.WebhookClientConfig {
	if e.URLHost != "" {
		return admissionregistrationv1.WebhookClientConfig{
			URL:      ptr.To(fmt.Sprintf("https://%s:%d%s", e.URLHost, e.Port, path)),
			CABundle: caBundle,
		}
	}
	return admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{
			Namespace: e.Namespace, Name: e.Service, Path: ptr.To(path), Port: ptr.To(int32(443)),
		},
		CABundle: caBundle,
	}
}

// ValidatingConfig is the webhook configuration Rampart registers. It reaches
// only what a rule can apply to: DELETE of objects that carry the protection
// label, outside Rampart's own namespace. An outage of Rampart therefore
// blocks nothing unprotected, and fails closed for what is protected.
func ValidatingConfig(ep Endpoint, caBundle []byte, ownNamespace string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ValidatingConfigName, Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "deletion.rampart.io",
			ClientConfig: ep.clientConfig(DeletionPath, caBundle),
			// Any resource may carry the label; the selector lets only
			// labelled objects through.
			Rules: []admissionregistrationv1.RuleWithOperations{deleteRule("*", "*", admissionregistrationv1.AllScopes)},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: v1alpha1.LabelProtection, Operator: metav1.LabelSelectorOpIn,
				Values: []string{string(v1alpha1.ProtectionAlways), string(v1alpha1.ProtectionCascading)},
			}}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ownNamespace},
			}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func deleteRule(group, resource string, scope admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource}, Scope: ptr.To(scope),
		},
	}
}

// Register creates or updates Rampart's webhook configurations.
func Register(ctx context.Context, c client.Client, ep Endpoint, caBundle []byte, ownNamespace string) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ValidatingConfig(ep, caBundle, ownNamespace))
	if err != nil {
		return err
	}
	cfg := client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u})
	return c.Apply(ctx, cfg, client.FieldOwner("rampart-manager"), client.ForceOwnership)
}
