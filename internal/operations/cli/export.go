package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	celvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	chart "github.com/rampart-io/rampart/charts/rampart"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

func newExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print Rampart's rules in forms that work without Rampart",
	}
	cmd.AddCommand(newExportPoliciesCommand())
	return cmd
}

type exportOptions struct {
	files            []string
	labels           bool
	rampartNamespace string
	exempt           v1alpha1.Subjects
	exemptSAs        []string
}

func newExportPoliciesCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "policies",
		Short: "Compile the static rules to ValidatingAdmissionPolicies the API server enforces itself",
		Long: `policies prints, as YAML to apply, a ValidatingAdmissionPolicy and its
binding for each of Rampart's static rules: the label rules
(rampart.io/protection=Always on any resource; rampart.io/explicit-replicas
on Deployments, ReplicaSets, StatefulSets and ReplicationControllers, and
on each custom resource whose CRD has a scale subresource, its replicas
read at the CRD's specReplicasPath) and each ProtectionPolicy's
protection: Always and explicitReplicas, with its selectors, exemptions
and mode. The API server then enforces them in CEL, with no webhook call,
with Rampart down or not installed at all. Denials say the same as
Rampart's webhooks.

What needs the cluster's state is not compiled and needs Rampart running:
protection Cascading, the scale subresource (kubectl scale: its requests
carry no labels), budgets, flow control and change windows. A CRD whose
served versions keep replicas at different paths, or at a path with a
field name CEL escapes (a dash, a reserved word), is left to the webhook:
the header names it and says why.

The policies come from the cluster (every ProtectionPolicy and CRD), or
from files with -f (YAML; ProtectionPolicies and CustomResourceDefinitions
are read, other kinds skipped: only the CRDs in the files count), so they
can be compiled in CI without a cluster; a file's policies are validated
as the API server would (the CRD's schema and rules), and one it would
refuse is an error. A CRD added later needs a new export. The API server
loads new policies on
a one-second tick, so the first ones applied can be in force a second
before the last: check the LAST policy printed with a dry run before
relying on any of them (it is loaded after the others), e.g.
  kubectl delete configmap NAME --dry-run=server`,
		Example: `  rampart export policies | kubectl apply -f -
  rampart export policies -f policies.yaml --replicas-exempt-service-accounts kube-system:horizontal-pod-autoscaler
  kubectl get validatingadmissionpolicies -l app.kubernetes.io/managed-by=rampart`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := exemptServiceAccounts(&o.exempt, o.exemptSAs); err != nil {
				return err
			}
			var in exportInput
			var err error
			if len(o.files) > 0 {
				in, err = fromFiles(cmd.Context(), cmd.InOrStdin(), cmd.ErrOrStderr(), o.files)
			} else {
				in, err = fromCluster(cmd, flags)
			}
			if err != nil {
				return err
			}
			return writeCompiled(cmd.OutOrStdout(), in, o)
		},
	}
	flags.AddFlags(cmd.Flags())
	f := cmd.Flags()
	f.StringSliceVarP(&o.files, "filename", "f", nil, "compile the ProtectionPolicies in these YAML files ('-' is standard input) instead of the cluster's")
	f.BoolVar(&o.labels, "labels", true, "include the label rules (rampart.io/protection=Always, rampart.io/explicit-replicas)")
	f.StringVar(&o.rampartNamespace, "rampart-namespace", "rampart-system", "Rampart's namespace, which no rule reaches (as with the webhooks); empty: none left out")
	addReplicasExemptFlags(f, &o.exempt, &o.exemptSAs)
	return cmd
}

// exportInput is what the policies are compiled from: the
// ProtectionPolicies, and the CRDs (their custom resources with a scale
// subresource).
type exportInput struct {
	policies []v1alpha1.ProtectionPolicy
	crds     []apiextensionsv1.CustomResourceDefinition
}

func fromCluster(cmd *cobra.Command, flags *genericclioptions.ConfigFlags) (exportInput, error) {
	c, err := rampartClient(flags)
	if err != nil {
		return exportInput{}, err
	}
	var list v1alpha1.ProtectionPolicyList
	if err := c.List(cmd.Context(), &list); err != nil {
		return exportInput{}, fmt.Errorf("listing ProtectionPolicies (use -f to compile from files): %w", err)
	}
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return exportInput{}, err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return exportInput{}, err
	}
	crds, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return exportInput{}, fmt.Errorf("listing CustomResourceDefinitions, for the replicas of custom resources (use -f to compile from files): %w", err)
	}
	return exportInput{policies: list.Items, crds: crds.Items}, nil
}

// fromFiles reads ProtectionPolicies and CRDs from YAML or JSON
// documents. The API server is not there to validate them: checkPolicy
// does as it would for a policy.
func fromFiles(ctx context.Context, stdin io.Reader, stderr io.Writer, files []string) (exportInput, error) {
	var out exportInput
	for _, name := range files {
		var r io.Reader
		if name == "-" {
			r = stdin
		} else {
			data, err := os.ReadFile(name)
			if err != nil {
				return exportInput{}, err
			}
			r = bytes.NewReader(data)
		}
		docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
		for i := 1; ; i++ {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return exportInput{}, fmt.Errorf("%s: %w", name, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				return exportInput{}, fmt.Errorf("%s: document %d: %w", name, i, err)
			}
			if isCRD(head.APIVersion, head.Kind) {
				crd, err := readCRD(doc)
				if err != nil {
					return exportInput{}, fmt.Errorf("%s: document %d: %w", name, i, err)
				}
				out.crds = append(out.crds, crd)
				continue
			}
			if !isProtectionPolicy(head.APIVersion, head.Kind) {
				fmt.Fprintf(stderr, "%s: document %d: skipping %s %s (only ProtectionPolicies and CustomResourceDefinitions are read)\n", name, i, head.APIVersion, head.Kind)
				continue
			}
			var p v1alpha1.ProtectionPolicy
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				return exportInput{}, fmt.Errorf("%s: document %d: %w", name, i, err)
			}
			errs, err := checkPolicy(ctx, &p, doc)
			if err != nil {
				return exportInput{}, err
			}
			if len(errs) > 0 {
				return exportInput{}, fmt.Errorf("%s: document %d: ProtectionPolicy %q: %w", name, i, p.Name, errs.ToAggregate())
			}
			out.policies = append(out.policies, p)
		}
	}
	return out, nil
}

func isCRD(apiVersion, kind string) bool {
	return kind == "CustomResourceDefinition" && apiVersion == apiextensionsv1.SchemeGroupVersion.String()
}

// readCRD reads a CRD for its scale subresources. Its name must be the
// one the API server would require (plural.group): the compiled policies
// are named after it and match its resource.
func readCRD(doc []byte) (apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(doc, &crd); err != nil {
		return crd, err
	}
	if want := crd.Spec.Names.Plural + "." + crd.Spec.Group; crd.Name != want || crd.Spec.Names.Plural == "" || crd.Spec.Group == "" {
		return crd, fmt.Errorf("CustomResourceDefinition %q: its name must be spec.names.plural.spec.group (%q), as the API server requires", crd.Name, want)
	}
	return crd, nil
}

func isProtectionPolicy(apiVersion, kind string) bool {
	return kind == "ProtectionPolicy" && apiVersion == v1alpha1.GroupVersion.String()
}

// checkPolicy validates a policy read from a file as the API server
// would on kubectl apply: against the ProtectionPolicy CRD's schema as
// the chart ships it (required fields, enums, patterns) and its CEL rules.
// Compiling what the API server would refuse could protect something else
// than the file says.
func checkPolicy(ctx context.Context, p *v1alpha1.ProtectionPolicy, doc []byte) (field.ErrorList, error) {
	v, err := policyValidator()
	if err != nil {
		return nil, err
	}
	// The document as the API server would read it (integers as int64),
	// not the typed policy, whose absent lists would read as null.
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return field.ErrorList{field.Required(field.NewPath("metadata", "name"), "a policy needs a name")}, nil
	}
	// Names are checked by the API server itself, not by the schema.
	if msgs := validation.IsDNS1123Subdomain(p.Name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), p.Name, strings.Join(msgs, "; "))}, nil
	}
	// What the CEL rules may read of metadata, as the API server passes it.
	obj["metadata"] = map[string]any{"name": p.Name}
	delete(obj, "status")
	errs := apiextensionsvalidation.ValidateCustomResource(nil, obj, v.schema)
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...), nil
}

type crdValidator struct {
	schema     apiextensionsvalidation.SchemaValidator
	structural *structuralschema.Structural
	cel        *celvalidation.Validator
}

// policyValidator is built once from the embedded CRD.
var policyValidator = sync.OnceValues(func() (*crdValidator, error) {
	raw, err := chart.Manifests.ReadFile("crds/rampart.io_protectionpolicies.yaml")
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return nil, fmt.Errorf("the embedded ProtectionPolicy CRD: %w", err)
	}
	for _, ver := range crd.Spec.Versions {
		if ver.Name != v1alpha1.GroupVersion.Version || ver.Schema == nil {
			continue
		}
		var props apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(ver.Schema.OpenAPIV3Schema, &props, nil); err != nil {
			return nil, err
		}
		sv, _, err := apiextensionsvalidation.NewSchemaValidator(&props)
		if err != nil {
			return nil, err
		}
		ss, err := structuralschema.NewStructural(&props)
		if err != nil {
			return nil, err
		}
		return &crdValidator{schema: sv, structural: ss, cel: celvalidation.NewValidator(ss, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("the embedded ProtectionPolicy CRD has no schema for %s", v1alpha1.GroupVersion.Version)
})

// writeCompiled prints the compiled policies as one YAML stream, each
// binding after its policy.
func writeCompiled(w io.Writer, in exportInput, o exportOptions) error {
	opts := compiled.Options{OwnNamespace: o.rampartNamespace, ReplicasExempt: o.exempt}
	scaled, notCompiled := compiled.ScaledResources(in.crds)
	opts.Scaled = scaled
	// One compiled policy per name: kubectl apply would let a later one
	// overwrite an earlier one of the same name.
	names := compiled.Names{}
	var out []compiled.Policy
	if o.labels {
		out, _ = names.Claim("", append(compiled.LabelRules(opts), compiled.ScaledLabelRules(opts)...))
	}
	var left []string
	for _, n := range notCompiled {
		left = append(left, fmt.Sprintf("#   CustomResourceDefinition %s: the replicas of its custom resources, because %s", n.CRD, n.Why))
	}
	for i := range in.policies {
		p := &in.policies[i]
		kept, notKept := names.Claim(p.Name, compiled.FromPolicy(p, opts))
		out = append(out, kept...)
		for _, l := range notKept {
			left = append(left, fmt.Sprintf("#   ProtectionPolicy %s: %s, because %s", p.Name, l.Name, l.Why))
		}
		if p.Spec.Protection == v1alpha1.ProtectionCascading {
			left = append(left, fmt.Sprintf("#   ProtectionPolicy %s: protection Cascading", p.Name))
		}
	}
	fmt.Fprintln(w, "# Compiled by `rampart export policies`: Rampart's static rules, enforced by the API server.")
	fmt.Fprintln(w, "# Not compiled (they need Rampart running): Cascading, the scale subresource.")
	if len(scaled) > 0 {
		var crds []string
		for _, s := range scaled {
			crds = append(crds, s.CRD+" ("+s.Path+")")
		}
		fmt.Fprintln(w, "# Custom resources' replicas compiled for the CRDs: "+strings.Join(crds, ", ")+".")
	}
	if len(left) > 0 {
		fmt.Fprintln(w, "# Left to Rampart's webhooks here:")
		fmt.Fprintln(w, strings.Join(left, "\n"))
	}
	for _, c := range out {
		for _, obj := range []any{c.Policy, c.Binding} {
			data, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			// Drop the empty status and creationTimestamp: kubectl apply
			// would carry them as fields this tool owns.
			data = bytes.ReplaceAll(data, []byte("  creationTimestamp: null\n"), nil)
			data = bytes.ReplaceAll(data, []byte("status: {}\n"), nil)
			fmt.Fprintf(w, "---\n%s", data)
		}
	}
	return nil
}
