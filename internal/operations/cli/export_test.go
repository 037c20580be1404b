package cli_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/cli"
)

// export runs `rampart export policies ARGS` with stdin and returns what
// it printed and its error.
func export(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := cli.NewRoot()
	var out, errOut bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"export", "policies"}, args...))
	err = root.Execute()
	return out.String(), errOut.String(), err
}

// applied reads the export as kubectl apply would: each document a
// ValidatingAdmissionPolicy or a binding, with no field those types lack.
func applied(t *testing.T, stream string) (names []string) {
	t.Helper()
	docs := utilyaml.NewDocumentDecoder(io.NopCloser(strings.NewReader(stream)))
	buf := make([]byte, 1<<20)
	for {
		n, err := docs.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the export: %v", err)
		}
		doc := buf[:n]
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("a document is not YAML: %v\n%s", err, doc)
		}
		switch head.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				t.Fatalf("policy: %v\n%s", err, doc)
			}
			names = append(names, "policy/"+p.Name)
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict(doc, &b); err != nil {
				t.Fatalf("binding: %v\n%s", err, doc)
			}
			names = append(names, "binding/"+b.Name)
		case "":
			// comments only
		default:
			t.Fatalf("the export holds a %s:\n%s", head.Kind, doc)
		}
	}
	return names
}

// compiledPairs are the documents of compiled policies by name: each
// policy, then its binding.
func compiledPairs(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, "policy/"+n, "binding/"+n)
	}
	return out
}

// exported runs the export, which must succeed, and checks it holds the
// compiled policies named, in order; it returns what it printed.
func exported(t *testing.T, stdin string, want []string, args ...string) (stdout, stderr string) {
	t.Helper()
	out, errOut, err := export(t, stdin, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if got := applied(t, out); !slices.Equal(got, want) {
		t.Errorf("exported %v, want %v", got, want)
	}
	return out, errOut
}

const exportPolicy = `apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: payments}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  protection: Always
  explicitReplicas: {guard: ToZero}
`

// TestExportPoliciesFromFiles: what -f compiles, what it skips and says
// so, and that the output is what kubectl apply takes; the same from
// standard input and without the label rules.
func TestExportPoliciesFromFiles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	mixed := exportPolicy + "---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n"
	if err := os.WriteFile(file, []byte(mixed), 0o600); err != nil {
		t.Fatal(err)
	}
	want := compiledPairs("deletion.rampart.io", "replicas.rampart.io", "saved-pods.rampart.io", "payments.deletion.policy.rampart.io", "payments.replicas.policy.rampart.io")
	_, errOut := exported(t, "", want, "-f", file)
	if !strings.Contains(errOut, "skipping apps/v1 Deployment (only ProtectionPolicies and CustomResourceDefinitions are read)") {
		t.Errorf("the skipped Deployment is not named on stderr:\n%s", errOut)
	}

	exported(t, exportPolicy, want[6:], "-f", "-", "--labels=false")
}

// scaledCRD is a CRD whose scale subresource keeps replicas at path.
func scaledCRD(plural, kind, path string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[1]s.example.com}
spec:
  group: example.com
  names: {plural: %[1]s, kind: %[2]s}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    subresources: {scale: {specReplicasPath: %[3]s, statusReplicasPath: .status.size}}
`, plural, kind, path)
}

// exportCRDs are CRDs with a scale subresource: one at a path CEL reads,
// one whose field name it escapes.
var exportCRDs = scaledCRD("widgets", "Widget", ".spec.size") + "---\n" + scaledCRD("dashes", "Dash", ".spec.desired-size")

// TestExportPoliciesCompilesCustomResourcesInTheFiles: with -f, the CRDs
// in the files count: the replicas of a custom resource with a scale
// subresource are compiled for the label and for a policy covering it,
// and a CRD whose path CEL cannot read as written is named in the header
// as left to the webhook.
func TestExportPoliciesCompilesCustomResourcesInTheFiles(t *testing.T) {
	policy := strings.Replace(exportPolicy, "resources: [{apiGroups: [apps], resources: [deployments]}]",
		"resources: [{apiGroups: [apps, example.com], resources: [deployments, widgets, dashes]}]", 1)
	out, _ := exported(t, exportCRDs+"---\n"+policy, compiledPairs("deletion.rampart.io", "replicas.rampart.io", "saved-pods.rampart.io", "widgets.example.com.replicas.rampart.io",
		"payments.deletion.policy.rampart.io", "payments.replicas.policy.rampart.io", "payments.replicas.widgets.example.com.policy.rampart.io"), "-f", "-")
	for _, w := range []string{
		"# Not compiled (they need Rampart running): Cascading, the scale subresource.\n",
		"# Custom resources' replicas compiled for the CRDs: widgets.example.com (.spec.size).",
		`#   CustomResourceDefinition dashes.example.com: the replicas of its custom resources, because its replicas path ".spec.desired-size": field name "desired-size" is escaped in CEL`,
		"has(object.spec.size)",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the export does not say %q:\n%s", w, out)
		}
	}
	bad := strings.Replace(exportCRDs, "metadata: {name: widgets.example.com}", "metadata: {name: widget.example.com}", 1)
	if _, _, err := export(t, bad, "-f", "-"); err == nil || !strings.Contains(err.Error(), `its name must be spec.names.plural.spec.group ("widgets.example.com")`) {
		t.Errorf("a CRD named unlike its resource: %v; want it refused", err)
	}
}

// TestExportPoliciesCompilesEachNameOnce: a policy name with dots joined
// to a CRD's can make a second policy compile to a name the first already
// has (kubectl apply would keep only the later). The first keeps it; the
// later one's rule is named in the header as left to the webhooks, why,
// and how to fix it; the rest of both is compiled.
func TestExportPoliciesCompilesEachNameOnce(t *testing.T) {
	crd := strings.NewReplacer("{name: w.example.com}", "{name: w.x.deletion}", "group: example.com", "group: x.deletion").
		Replace(scaledCRD("w", "W", ".spec.size"))
	first := strings.Replace(exportPolicy, "name: payments", "name: a.replicas.w.x", 1)
	later := strings.NewReplacer("name: payments", "name: a", "resources: [deployments]", "resources: [w]", "apiGroups: [apps]", "apiGroups: [x.deletion]",
		"  protection: Always\n", "").Replace(exportPolicy)
	clash := "a.replicas.w.x.deletion.policy.rampart.io"
	out, _ := exported(t, crd+"---\n"+first+"---\n"+later, compiledPairs(clash, "a.replicas.w.x.replicas.policy.rampart.io"), "-f", "-", "--labels=false")
	want := `#   ProtectionPolicy a: ` + clash + `, because ProtectionPolicy "a.replicas.w.x" already compiles to a policy named "` + clash +
		`"; rename one of the two ProtectionPolicies (names without dots never clash)`
	if !strings.Contains(out, want) {
		t.Errorf("the export does not say %q:\n%s", want, out)
	}
}

// TestExportPoliciesRefusesBadInput: a file that would compile to
// something else than the author meant is refused with the document and
// the field, and nothing is printed to apply.
func TestExportPoliciesRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, doc string
		wantIn    []string
	}{
		{name: "misspelt field", doc: strings.Replace(exportPolicy, "protection: Always", "protecton: Always", 1),
			wantIn: []string{"document 1", `unknown field "protecton"`}},
		{name: "unknown guard", doc: strings.Replace(exportPolicy, "guard: ToZero", "guard: Down", 1),
			wantIn: []string{`ProtectionPolicy "payments"`, "spec.explicitReplicas.guard", `"Down"`, "ToZero"}},
		{name: "unknown protection", doc: strings.Replace(exportPolicy, "protection: Always", "protection: always", 1),
			wantIn: []string{"spec.protection", `"always"`, "Always", "Cascading"}},
		{name: "no resources", doc: strings.Replace(exportPolicy, "  resources: [{apiGroups: [apps], resources: [deployments]}]\n", "", 1),
			wantIn: []string{"spec.resources", "Required value"}},
		{name: "a subresource", doc: strings.Replace(exportPolicy, "resources: [deployments]", "resources: [deployments/scale]", 1),
			wantIn: []string{"spec.resources[0].resources[0]", `"deployments/scale"`}},
		{name: "a selector expression without values", doc: exportPolicy + "  objectSelector: {matchExpressions: [{key: tier, operator: In}]}\n",
			wantIn: []string{"spec.objectSelector", "each matchExpression needs operator In or NotIn with values"}},
		{name: "neither protection nor replicas", doc: strings.Replace(strings.Replace(exportPolicy, "  protection: Always\n", "", 1), "  explicitReplicas: {guard: ToZero}\n", "", 1),
			wantIn: []string{"set protection, explicitReplicas or explicitDeletion"}},
		{name: "a name too long for its webhook", doc: strings.Replace(exportPolicy, "name: payments", "name: "+strings.Repeat("p", 64), 1),
			wantIn: []string{"a policy name is at most 63 characters"}},
		{name: "a name that is no DNS subdomain", doc: strings.Replace(exportPolicy, "name: payments", "name: Payments", 1),
			wantIn: []string{"metadata.name", `"Payments"`, "lowercase"}},
		{name: "not YAML", doc: "kind: ProtectionPolicy\n  spec: [\n", wantIn: []string{"yaml"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tt.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			out, _, err := export(t, "", "-f", file)
			if err == nil {
				t.Fatalf("exported:\n%s", out)
			}
			if !strings.Contains(err.Error(), file) {
				t.Errorf("the error does not name the file: %v", err)
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			if strings.Contains(out, "kind: ValidatingAdmissionPolicy") {
				t.Errorf("policies were printed despite the error:\n%s", out)
			}
		})
	}
	if _, _, err := export(t, "", "-f", filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}
