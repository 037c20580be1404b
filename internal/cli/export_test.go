package cli_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/cli"
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
	out, errOut, err := export(t, "", "-f", file)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	want := []string{
		"policy/deletion.rampart.io", "binding/deletion.rampart.io",
		"policy/replicas.rampart.io", "binding/replicas.rampart.io",
		"policy/payments.deletion.policy.rampart.io", "binding/payments.deletion.policy.rampart.io",
		"policy/payments.replicas.policy.rampart.io", "binding/payments.replicas.policy.rampart.io",
	}
	if got := applied(t, out); !slices.Equal(got, want) {
		t.Errorf("exported %v, want %v", got, want)
	}
	if !strings.Contains(errOut, "skipping apps/v1 Deployment (only ProtectionPolicies are compiled)") {
		t.Errorf("the skipped Deployment is not named on stderr:\n%s", errOut)
	}

	out, errOut, err = export(t, exportPolicy, "-f", "-", "--labels=false")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if got := applied(t, out); !slices.Equal(got, want[4:]) {
		t.Errorf("from standard input without the label rules: exported %v, want %v", got, want[4:])
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
