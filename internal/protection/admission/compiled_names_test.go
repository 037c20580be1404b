package admission_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// Two ProtectionPolicies whose compiled policies would share a name (the
// dotted name of one joined to a CRD's by the other), and a compiled name
// longer than the API server takes: the manager compiles each name once
// (the first policy keeps it), leaves the rest to the webhooks, says so in
// the policy's Ready condition with the fix, and logs it; every other
// rule of both policies is compiled and in force.
func TestCompiledNamesClashingOrTooLongLeftToTheWebhooks(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1})
	ctx := context.Background()
	crds := apiextensionsclient.NewForConfigOrDie(env.Config).ApiextensionsV1().CustomResourceDefinitions()
	scale := &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{
		SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas"}}
	// A group may end in any label: here "deletion".
	clashing := widgetCRD("widgets.clash.deletion", nil)
	clashing.Spec.Versions[0].Subresources = scale
	// 211 characters: its own label rule's name fits, not one of a
	// policy named with more than 14.
	longGroup := strings.Repeat("g", 60) + "." + strings.Repeat("h", 60) + "." + strings.Repeat("i", 58) + "." + strings.Repeat("j", 11) + ".example.com"
	long := widgetCRD("things."+longGroup, nil)
	long.Spec.Names.Kind, long.Spec.Names.ListKind, long.Spec.Names.Singular = "Thing", "ThingList", "thing"
	long.Spec.Versions[0].Subresources = scale
	if len(long.Name) != 211 {
		t.Fatalf("the long CRD's name has %d characters, want 211", len(long.Name))
	}
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{clashing, long} {
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ns := env.Namespace(t)
	// "a" compiles the replicas of the clashing CRD's custom resources
	// to a.replicas.widgets.clash.deletion.policy.rampart.io ...
	if err := applyPolicy(t, env, `{apiVersion: rampart.io/v1alpha1, kind: ProtectionPolicy, metadata: {name: a}, spec: {
  resources: [{apiGroups: [clash.deletion], resources: [widgets]}], explicitReplicas: {guard: All}}}`); err != nil {
		t.Fatal(err)
	}
	// ... the name this one's deletion rule compiles to.
	dotted := "a.replicas.widgets.clash"
	if err := applyPolicy(t, env, fmt.Sprintf(`{apiVersion: rampart.io/v1alpha1, kind: ProtectionPolicy, metadata: {name: %s}, spec: {
  resources: [{apiGroups: [""], resources: [configmaps]}, {apiGroups: [apps], resources: [deployments]}, {apiGroups: [%s], resources: [things]}],
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}, protection: Always, explicitReplicas: {guard: All}}}`, dotted, longGroup, ns)); err != nil {
		t.Fatal(err)
	}
	clash := compiled.ScaledReplicasName("a", clashing.Name)
	if clash != compiled.DeletionName(dotted) {
		t.Fatalf("the example no longer clashes: %s", clash)
	}
	tooLong := compiled.ScaledReplicasName(dotted, long.Name)

	waitPolicyReadySaying(t, env, "a", "also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy "+clash+")")
	waitPolicyReadySaying(t, env, dotted, "also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy "+compiled.ReplicasName(dotted)+")"+
		"; some static rules left to its webhooks, so not enforced while Rampart is down: "+
		`ProtectionPolicy "a" already compiles to a policy named "`+clash+`"; rename one of the two ProtectionPolicies (names without dots never clash); `+
		fmt.Sprintf("the compiled policy's name %q would be %d characters, more than the API server takes (253); a policy name of at most 14 characters compiles it", tooLong, len(tooLong)))

	vap, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, clash, metav1.GetOptions{})
	if err != nil || vap.Labels[compiled.LabelSource] != "a" {
		t.Fatalf("ValidatingAdmissionPolicy %s: %v, compiled from %q; want from the first policy, a", clash, err, vap.Labels[compiled.LabelSource])
	}
	// What is left to the webhook still holds while Rampart runs.
	if _, err := env.Kubectl(t, "-n", ns, "create", "configmap", "keep"); err != nil {
		t.Fatal(err)
	}
	out, err := env.Kubectl(t, "-n", ns, "delete", "configmap", "keep")
	if err == nil || !strings.Contains(out, `is protected by ProtectionPolicy "`+dotted+`"`) || strings.Contains(out, "ValidatingAdmissionPolicy") {
		t.Errorf("deleting a ConfigMap of %s: %v\n%s\nwant it refused by the policy's webhook", dotted, err, out)
	}
	logs, err := os.ReadFile(filepath.Join(env.Dir, "logs", "rampart-manager.log"))
	if err != nil || !strings.Contains(string(logs), "compiled policy left to the webhooks") || !strings.Contains(string(logs), tooLong) {
		t.Errorf("the manager's log does not name %s as left to the webhooks (%v)", tooLong, err)
	}
}
