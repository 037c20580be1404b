package admission

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/compiled"
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
	// Replicas, when there are several, are the base URLs of every
	// replica's webhook server (a local cluster with several managers): each
	// webhook is registered once per replica, and the API server sends each
	// request to exactly one of them by its UID (see partition).
	Replicas []string
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

// Registration is what the webhook configurations are made from.
type Registration struct {
	// Protections make the webhooks, in order
	// (internal/protection/protections.All).
	Protections []Protection
	Endpoint    Endpoint
	CABundle    []byte
	// OwnNamespace is Rampart's namespace, never judged.
	OwnNamespace string
	// Objects are the objects that register webhooks of their own, by
	// kind (ObjectKind.Kind), sorted by namespace and name.
	Objects map[string][]client.Object
	// Keys are the key sets the webhooks are scoped with, by name
	// (KeySet.Name): ScaleTargetKeys, the budgets' NamespaceKeys.
	Keys map[string][]string
	// RecycleBin is on (the manager keeps copies): RecyclePolicies then
	// get webhooks of their own.
	RecycleBin bool
	// NamespaceContents: with RecycleBin, the bin keeps what the
	// namespace controller deletes in a protected namespace (a cap above
	// zero).
	NamespaceContents bool
	// GeneratedBudgets registers the webhook that admits workloads
	// annotated rampart.io/generate-pub once their budget exists.
	GeneratedBudgets bool
	// Widenings are webhooks kept wider for a while than the caches make
	// them, by widening set (WideningSet.Name): the sets a protection
	// declares with OwnsWidenings, brought by InForce.Widen or by an
	// object put in force (a policy just admitted, a namespace just
	// relabelled into one).
	Widenings map[string][]Widening
	// CompiledLabels says that the label rules compiled to
	// ValidatingAdmissionPolicies (internal/protection/compiled) are in
	// force on every API server: the label webhooks then reach only what
	// needs Rampart (Cascading; a workload gaining the explicit-replicas
	// label, whose scale subresource is put in force; custom resources).
	CompiledLabels bool
	// Scaled are the custom resources with a scale subresource whose
	// replicas are compiled, when CompiledLabels: the label webhook keeps
	// judging their replica changes, all but the confirmed ones of an
	// object that carried the label, which it would admit anyway; those
	// are left to the compiled policies, so that they go through while
	// Rampart is down.
	Scaled []compiled.ScaledResource
	// Token, when set, adds the probe webhook that a Barrier uses to see
	// that the API servers have loaded this version of the configuration:
	// a fresh one for each version written.
	Token string
	// Owner, when set, owns the configuration, so that the garbage
	// collector deletes them with it: `helm uninstall` deletes the
	// manager's ClusterRole, and with it the webhooks that would otherwise
	// keep calling a manager that is gone.
	Owner *metav1.OwnerReference
}

// ValidatingConfig is the webhook configuration Rampart registers. Each
// webhook reaches only what a rule can apply to: objects carrying Rampart's
// labels (or, for the scale subresource, whose labels no selector can see,
// the workloads named in a match condition), outside Rampart's own
// namespace. An outage of Rampart therefore blocks nothing unprotected, and
// fails closed for what is protected.
func ValidatingConfig(reg Registration) *admissionregistrationv1.ValidatingWebhookConfiguration {
	var hooks []admissionregistrationv1.ValidatingWebhook
	for _, w := range Webhooks(reg) {
		hooks = append(hooks, w.ValidatingWebhook)
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ValidatingConfigName, Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
		Webhooks:   spreadValidating(reg.Endpoint, hooks),
	}
}

// spread registers each webhook once per local replica (see partition);
// fields points at a webhook's name, URL and match conditions.
func spread[W any, P interface {
	*W
	DeepCopy() *W
}](e Endpoint, hooks []W, fields func(*W) (*string, *string, *[]admissionregistrationv1.MatchCondition)) []W {
	n := len(e.Replicas)
	if n <= 1 || e.URLHost == "" {
		return hooks
	}
	base := fmt.Sprintf("https://%s:%d", e.URLHost, e.Port)
	var out []W
	for i, url := range e.Replicas {
		for j := range hooks {
			r := P(&hooks[j]).DeepCopy()
			name, u, conds := fields(r)
			*name = fmt.Sprintf("r%d.%s", i, *name)
			*u = url + strings.TrimPrefix(*u, base)
			*conds = append(*conds, partition(i, n))
			out = append(out, *r)
		}
	}
	return out
}

// inNamespaces selects the named namespaces.
func InNamespaces(names []string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names,
	}}}
}

// partition is true for the requests replica i of n serves, chosen by the
// last character of the object's name (the random suffix of generated
// names such as pods'): CEL offers match conditions no request UID and no
// hash. Exactly one replica's copy of a webhook matches any request;
// replica 0 takes names that are empty (DeleteCollection items) or end
// outside [0-9a-z].
func partition(i, n int) admissionregistrationv1.MatchCondition {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	share := func(pick func(int) bool) string {
		var out []string
		for d, c := range alphabet {
			if pick(d % n) {
				out = append(out, strconv.Quote(string(c)))
			}
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	last := "size(request.name) > 0 && request.name.substring(size(request.name) - 1) in "
	expr := last + share(func(r int) bool { return r == i })
	if i == 0 {
		expr = "!(" + last + share(func(r int) bool { return r != 0 }) + ")"
	}
	return admissionregistrationv1.MatchCondition{Name: "replica-" + strconv.Itoa(i), Expression: expr}
}

// BaseName is a webhook's name without the replica prefix ("r1.") that
// several local replicas add.
func BaseName(name string) string {
	if len(name) > 1 && name[0] == 'r' {
		if i := strings.IndexByte(name, '.'); i > 1 {
			if _, err := strconv.Atoi(name[1:i]); err == nil {
				return name[i+1:]
			}
		}
	}
	return name
}

// orEverything is the selector the API server stores for an absent one, so
// that what is registered compares equal to what was asked for.
func OrEverything(sel *metav1.LabelSelector) *metav1.LabelSelector {
	if sel == nil {
		return &metav1.LabelSelector{}
	}
	return sel
}

// withNotOwn adds the exclusion of Rampart's namespace to a selector.
func WithNotOwn(sel, notOwn *metav1.LabelSelector) *metav1.LabelSelector {
	out := notOwn.DeepCopy()
	if sel != nil {
		out.MatchLabels = sel.MatchLabels
		out.MatchExpressions = append(slices.Clone(sel.MatchExpressions), out.MatchExpressions...)
	}
	return out
}

func Rule(op admissionregistrationv1.OperationType, group, resource string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{op},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: []string{resource},
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}
}

// Register creates or updates Rampart's webhook configuration as given
// (made by ValidatingConfig, perhaps merged with what is live; its
// resourceVersion, when set, is a precondition).
func Register(ctx context.Context, c client.Client, reg Registration, validating *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(validating)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: u}
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	if reg.Owner != nil {
		obj.SetOwnerReferences([]metav1.OwnerReference{*reg.Owner})
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("rampart-manager"), client.ForceOwnership)
}

// DeleteRule reaches the DELETEs of the resources r names.
func DeleteRule(r v1alpha1.ResourceRule) admissionregistrationv1.RuleWithOperations {
	rl := Rule(admissionregistrationv1.Delete, "", "")
	rl.APIGroups, rl.Resources = r.APIGroups, r.Resources
	return rl
}
