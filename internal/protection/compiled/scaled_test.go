package compiled_test

import (
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// crd is a CRD whose versions keep replicas at paths ("" no scale
// subresource).
func crd(name string, paths ...string) apiextensionsv1.CustomResourceDefinition {
	plural, group, _ := strings.Cut(name, ".")
	c := apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural}}}
	for i, p := range paths {
		v := apiextensionsv1.CustomResourceDefinitionVersion{Name: fmt.Sprintf("v%d", i+1), Served: true}
		if p != "" {
			v.Subresources = &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: p}}
		}
		c.Spec.Versions = append(c.Spec.Versions, v)
	}
	return c
}

// TestScaledResourcesCompilesOnlyWhatCELReadsAsTheWebhookDoes: a CRD is
// compiled when its served versions agree on one path CEL reads as
// written; the others are left to the webhook, with the reason.
func TestScaledResourcesCompilesOnlyWhatCELReadsAsTheWebhookDoes(t *testing.T) {
	got, left := compiled.ScaledResources([]apiextensionsv1.CustomResourceDefinition{
		crd("widgets.example.com", ".spec.size", ".spec.size", ""),
		crd("gadgets.example.com", ".spec.replicas"),
		crd("plain.example.com", ""),
		crd("split.example.com", ".spec.replicas", ".spec.size"),
		crd("dashed.example.com", ".spec.desired-size"),
		crd("reserved.example.com", ".spec.in"),
		crd("deep.example.com", ".spec.scaling.count"),
	})
	var names []string
	for _, s := range got {
		names = append(names, s.CRD+" "+s.Resource.String()+" "+s.Path)
	}
	want := "deep.example.com deep.example.com .spec.scaling.count|gadgets.example.com gadgets.example.com .spec.replicas|widgets.example.com widgets.example.com .spec.size"
	if strings.Join(names, "|") != want {
		t.Errorf("compiled %q, want %q", strings.Join(names, "|"), want)
	}
	why := map[string]string{}
	for _, l := range left {
		why[l.CRD] = l.Why
	}
	for crd, w := range map[string]string{
		"split.example.com":    "different paths (.spec.replicas, .spec.size)",
		"dashed.example.com":   `field name "desired-size" is escaped in CEL`,
		"reserved.example.com": `field name "in" is escaped in CEL`,
	} {
		if !strings.Contains(why[crd], w) {
			t.Errorf("%s left to the webhook because %q, want it to say %q", crd, why[crd], w)
		}
	}
	if len(left) != 3 {
		t.Errorf("left to the webhook: %v, want the three above (a CRD without a scale subresource is no workload)", left)
	}
}
