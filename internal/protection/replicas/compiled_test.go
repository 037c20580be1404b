package replicas

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
)

// exemptUser is the requester of a row whose requester is exempt.
const exemptUser = "autoscaler-bot"

// agreeCompiled checks that the compiled policies, evaluated with
// kube-apiserver's own libraries, answer the write a row of the decision
// table describes as Decide did (v): an update of the workload that
// carries the explicit-replicas label, or that the row's policy covers
// with the row's guard. A custom resource's (compiledtest.Widgets) keeps
// its replicas where its CRD says. A write through the scale subresource
// carries no labels: it is never compiled, and the compiled policies must
// leave it to the webhook.
func agreeCompiled(t *testing.T, r Request, v verdict.Verdict) {
	t.Helper()
	exempt := v1alpha1.Subjects{Users: []string{exemptUser}}
	scaled := []compiled.ScaledResource{compiledtest.Widgets}
	var policies []compiled.Policy
	var labels map[string]string
	switch {
	case r.Guard == "": // nothing guards the object
	case r.Source.Policy != "":
		p := v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: r.Source.Policy}, Spec: v1alpha1.ProtectionPolicySpec{
			Resources:        []v1alpha1.ResourceRule{{APIGroups: []string{r.Resource.Group}, Resources: []string{r.Resource.Resource}}},
			ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: r.Guard},
			Exempt:           exempt,
		}}
		policies = compiled.FromPolicy(&p, compiled.Options{Scaled: scaled})
	case r.Guard != v1alpha1.GuardAll:
		t.Fatalf("the label guards every change: guard %s comes only from a policy; give the row a policy source", r.Guard)
	default:
		labels = map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
		o := compiled.Options{ReplicasExempt: exempt, Scaled: scaled}
		policies = append(compiled.LabelRules(o), compiled.ScaledLabelRules(o)...)
	}
	who := "alice"
	if r.Exempt {
		who = exemptUser
	}
	req := compiledtest.For(t, admission.Update, r.Resource, r.Namespace, r.Name, who)
	if r.Scale {
		// A Scale carries neither the workload's labels nor its
		// annotations.
		scale := schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
		req.GVK, req.Subresource = scale, "scale"
		req.Old = compiledtest.Object(scale, r.Namespace, r.Name, nil, r.Old, nil)
		req.Obj = compiledtest.Object(scale, r.Namespace, r.Name, nil, r.New, nil)
		compiledtest.Left(t, "a write through the scale subresource", compiledtest.InNamespace(t, r.Namespace).Admit(t, policies, req.Attributes()))
		return
	}
	var confirm map[string]string
	if r.Confirm != "" {
		confirm = map[string]string{v1alpha1.AnnotationConfirmReplicas: r.Confirm}
	}
	path := compiledtest.ReplicasPath(r.Resource)
	req.Old = compiledtest.ObjectAt(req.GVK, path, r.Namespace, r.Name, labels, r.Old, confirm)
	req.Obj = compiledtest.ObjectAt(req.GVK, path, r.Namespace, r.Name, labels, r.New, confirm)
	compiledtest.SameVerdict(t, v.Allowed, v.Message, compiledtest.InNamespace(t, r.Namespace).Admit(t, policies, req.Attributes()))
}
