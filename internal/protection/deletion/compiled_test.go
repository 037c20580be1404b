package deletion

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
)

// agreeCompiled checks that the compiled policies, evaluated with
// kube-apiserver's own libraries, answer the DELETE a row of the decision
// table describes as Decide did (v): the object carries the label, or the
// row's policy covers its resource. Cascading counts the cluster's
// dependents: it is never compiled, and the compiled policies must leave
// it to the webhook.
func agreeCompiled(t *testing.T, r Request, v verdict.Verdict) {
	t.Helper()
	var policies []compiled.Policy
	var labels map[string]string
	if r.Source.Policy != "" {
		p := v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: r.Source.Policy}, Spec: v1alpha1.ProtectionPolicySpec{
			Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{r.Resource.Group}, Resources: []string{r.Resource.Resource}}},
			Protection: r.Level,
		}}
		policies = compiled.FromPolicy(&p, compiled.Options{})
	} else {
		policies = compiled.LabelRules(compiled.Options{})
		if r.Level != "" {
			labels = map[string]string{v1alpha1.LabelProtection: string(r.Level)}
		}
	}
	// A request about a Namespace carries the namespace's name as its own.
	ns := r.Namespace
	if r.Resource == nsGR {
		ns = r.Name
	}
	req := compiledtest.For(t, admission.Delete, r.Resource, ns, r.Name, "alice")
	req.Old = compiledtest.Object(req.GVK, r.Namespace, r.Name, labels, nil, nil)
	got := compiledtest.InNamespace(t, ns).Admit(t, policies, req.Attributes())
	if r.Level == v1alpha1.ProtectionCascading {
		compiledtest.Left(t, "a Cascading delete", got)
		return
	}
	compiledtest.SameVerdict(t, v.Allowed, v.Message, got)
}
