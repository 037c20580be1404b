package admit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// ContentsPath is where the namespace contents' webhooks are served.
const ContentsPath = "/validate/namespace-contents"

// namespaceController is who empties a namespace being deleted:
// kube-controller-manager's namespace controller with
// --use-service-account-credentials (kubeadm, the managed clusters, rampart
// up), or kube-controller-manager itself without it.
var namespaceController = []string{"system:serviceaccount:kube-system:namespace-controller", "system:kube-controller-manager"}

// contentsWithin bounds one capture of a namespace's contents: the
// namespace controller deletes object by object (each item of its
// DeleteCollections reaches the webhook), and must not wait long on any.
const contentsWithin = time.Second

var namespacesGR = schema.GroupResource{Resource: "namespaces"}

// Contents keeps what the namespace controller deletes in a namespace
// Rampart protects (label rampart.io/protection, or a ProtectionPolicy
// over namespaces that selects it), so that the namespace can be restored
// whole with no RecyclePolicy. It never refuses: the copy is a courtesy
// to whoever restores the namespace, and the namespace controller must
// finish what the namespace's delete, already admitted, started.
type Contents struct {
	Bin        rampartadmission.Capturer
	Namespaces rampartadmission.NamespaceView
	Policies   rampartadmission.Policies
	// Tally caps what is kept per namespace.
	Tally    *recyclebin.NamespaceContents
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
}

var _ admission.Handler = (*Contents)(nil)

// Handle implements admission.Handler: always allowed.
func (h *Contents) Handle(ctx context.Context, req admission.Request) admission.Response {
	allowed := admission.Allowed("")
	if req.Operation != admissionv1.Delete || rampartadmission.DryRun(req) || h.Bin == nil || req.Namespace == "" ||
		len(req.OldObject.Raw) == 0 {
		return allowed
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	if gr.Resource == "events" {
		return allowed // the match condition leaves them out; an older configuration may not
	}
	if !h.emptying(req) {
		return allowed
	}
	keptBy, err := h.protectedBy(ctx, req.Namespace)
	if err != nil {
		logf.FromContext(ctx).Error(err, "recycle bin: reading ProtectionPolicies for a namespace being deleted; this object goes without a copy", "namespace", req.Namespace)
		return allowed
	}
	if keptBy == "" {
		return allowed
	}
	old, bad := rampartadmission.DeletedObject(req)
	if bad != nil {
		return allowed
	}
	now := h.Clock.Now()
	what := gr.String() + "/" + old.GetName()
	if reason, first := h.Tally.Take(req.Namespace, old.GetUID(), int64(len(req.OldObject.Raw)), now); reason != "" {
		h.notKept(ctx, req.Namespace, what, reason, first)
		return allowed
	}
	ctx, cancel := context.WithTimeout(ctx, contentsWithin)
	defer cancel()
	_, err = h.Bin.Capture(ctx, recyclebin.Entry{
		Resource:  schema.GroupVersionResource(req.Resource),
		Kind:      req.Kind.Kind,
		Namespace: req.Namespace,
		Name:      old.GetName(),
		UID:       old.GetUID(),
		DeletedBy: req.UserInfo.Username,
		Object:    req.OldObject.Raw,
	})
	if err != nil {
		h.Tally.Failed(req.Namespace, old.GetUID(), now)
		logf.FromContext(ctx).Error(err, "recycle bin: a protected namespace's object went without a copy, the store failed", "namespace", req.Namespace, "object", what)
	}
	return allowed
}

// emptying: the request is the namespace controller's, or any delete in a
// namespace being deleted.
func (h *Contents) emptying(req admission.Request) bool {
	return req.UserInfo.Username == namespaceController[0] || h.Namespaces.NamespaceTerminating(req.Namespace)
}

// protectedBy names what protects namespace ns ("" if nothing): its
// label, or the first ProtectionPolicy over namespaces that selects it. A
// namespace the cache does not know is taken as protected: the API
// server sent the request because its labels matched a webhook's
// namespaceSelector.
func (h *Contents) protectedBy(ctx context.Context, ns string) (string, error) {
	labels, known := h.Namespaces.NamespaceLabels(ns)
	if !known {
		return "the webhook's namespaceSelector", nil
	}
	switch v1alpha1.ProtectionLevel(labels[v1alpha1.LabelProtection]) {
	case v1alpha1.ProtectionAlways, v1alpha1.ProtectionCascading:
		return "label " + v1alpha1.LabelProtection, nil
	}
	if h.Policies == nil {
		return "", nil
	}
	ps, err := h.Policies.List(ctx)
	if err != nil {
		return "", err
	}
	// A namespace is matched on its own labels by both selectors, as the
	// API server matches a Namespace's own delete.
	if sel := policy.Select(ps, policy.Protecting, namespacesGR, labels, labels); len(sel) > 0 {
		return fmt.Sprintf("ProtectionPolicy %q", sel[0].Name), nil
	}
	return "", nil
}

// notKept reports an object of ns that went without a copy: a log line
// each (names only, never the object), and for the first one a Warning
// Event on the Namespace saying why and what to change.
func (h *Contents) notKept(ctx context.Context, ns, what, reason string, first bool) {
	logf.FromContext(ctx).Info("recycle bin: a protected namespace's object went without a copy", "namespace", ns, "object", what, "reason", reason)
	if !first || h.Recorder == nil {
		return
	}
	why := fmt.Sprintf("its contents reached the recycle bin's cap of %d bytes per namespace (--recycle-bin-namespace-max-size, "+
		"the chart's manager.recycleBin.namespaceMaxSize; raise it, or keep what matters with a RecyclePolicy, which has no such cap)", h.Tally.Max)
	if reason == recyclebin.NotKeptStore {
		why = "the recycle bin's store failed or was too slow, and the namespace controller is never held up for a copy (the manager's log says why)"
	}
	h.Recorder.Eventf(&corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: ns}, nil, corev1.EventTypeWarning,
		"ContentsNotKept", "Delete",
		"Namespace %s is being deleted and Rampart protects it, but from %s on its objects are deleted without a copy in the recycle bin: %s. "+
			"The manager's log names each object not kept; rampart_recyclebin_namespace_contents_not_kept_total counts them.", ns, what, why)
}

// contentsWebhooks reach the namespace controller's deletes in the
// namespaces Rampart protects: one webhook for the label, and one per
// ProtectionPolicy over namespaces (its selectors both match the
// namespace's own labels, as for the namespace's delete).
//
// They fail open (failurePolicy Ignore, 2 s): the namespace's delete was
// already admitted, and its copy kept, by the deletion webhook; the copy
// of its contents is worth less than a namespace controller stuck or
// slowed while Rampart is down. The match condition on the namespace
// controller's user keeps every other delete in those namespaces away.
func contentsWebhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	rule := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}
	hook := func(name string, nsSel *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
		h := b.Webhook(name, ContentsPath, rule)
		h.NamespaceSelector = rampartadmission.WithNotOwn(nsSel, b.NotOwn)
		h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		h.TimeoutSeconds = ptr.To(int32(2))
		h.MatchConditions = []admissionregistrationv1.MatchCondition{
			{Name: "namespace-controller", Expression: fmt.Sprintf("request.userInfo.username in [%q, %q]", namespaceController[0], namespaceController[1])},
			{Name: "not-events", Expression: `request.resource.resource != "events"`},
		}
		return h
	}
	out := rampartadmission.Own(rampartadmission.Owner{}, hook("namespace-contents.recycle.rampart.io", &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1alpha1.LabelProtection, Operator: metav1.LabelSelectorOpIn,
			Values: []string{string(v1alpha1.ProtectionAlways), string(v1alpha1.ProtectionCascading)}}}}))
	for _, p := range rampartadmission.ObjectsOf[*v1alpha1.ProtectionPolicy](reg, rampartadmission.PolicyKind) {
		if !policy.Protecting(p) || !policy.CoversResource(p, namespacesGR) {
			continue
		}
		out = append(out, rampartadmission.Own(rampartadmission.PolicyOwner(p.Name),
			hook(p.Name+".namespace-contents.recycle.rampart.io", both(p.Spec.NamespaceSelector, p.Spec.ObjectSelector)))...)
	}
	return out
}

// both selects what a and b both select (nil selects everything), as
// expressions only: two matchLabels on one key would not merge.
func both(a, b *metav1.LabelSelector) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	for _, s := range []*metav1.LabelSelector{a, b} {
		if s == nil {
			continue
		}
		// Sorted: the configuration is written again only when it changes.
		for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
			out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{s.MatchLabels[k]}})
		}
		out.MatchExpressions = append(out.MatchExpressions, s.MatchExpressions...)
	}
	return out
}
