package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
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
on Deployments, ReplicaSets, StatefulSets and ReplicationControllers) and
each ProtectionPolicy's protection: Always and explicitReplicas, with its
selectors, exemptions and mode. The API server then enforces them in CEL,
with no webhook call, with Rampart down or not installed at all. Denials
say the same as Rampart's webhooks.

What needs the cluster's state is not compiled and needs Rampart running:
protection Cascading, the scale subresource (kubectl scale: its requests
carry no labels), custom resources' replicas, budgets, flow control and
change windows.

The policies come from the cluster (every ProtectionPolicy), or from files
with -f (YAML; kinds other than ProtectionPolicy are skipped), so they can
be compiled in CI without a cluster. The API server takes a moment to load
new policies: check one with a dry run before relying on it, e.g.
  kubectl delete configmap NAME --dry-run=server`,
		Example: `  rampart export policies | kubectl apply -f -
  rampart export policies -f policies.yaml --replicas-exempt-service-accounts kube-system:horizontal-pod-autoscaler
  kubectl get validatingadmissionpolicies -l app.kubernetes.io/managed-by=rampart`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := exemptServiceAccounts(&o.exempt, o.exemptSAs); err != nil {
				return err
			}
			var policies []v1alpha1.ProtectionPolicy
			var err error
			if len(o.files) > 0 {
				policies, err = policiesFromFiles(cmd.InOrStdin(), cmd.ErrOrStderr(), o.files)
			} else {
				policies, err = policiesFromCluster(cmd, flags)
			}
			if err != nil {
				return err
			}
			return writeCompiled(cmd.OutOrStdout(), policies, o)
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

func policiesFromCluster(cmd *cobra.Command, flags *genericclioptions.ConfigFlags) ([]v1alpha1.ProtectionPolicy, error) {
	c, err := rampartClient(flags)
	if err != nil {
		return nil, err
	}
	var list v1alpha1.ProtectionPolicyList
	if err := c.List(cmd.Context(), &list); err != nil {
		return nil, fmt.Errorf("listing ProtectionPolicies (use -f to compile from files): %w", err)
	}
	return list.Items, nil
}

// policiesFromFiles reads ProtectionPolicies from YAML or JSON documents.
// The API server's validation of the CRD is not there to catch mistakes,
// so what compiling needs is checked here.
func policiesFromFiles(stdin io.Reader, stderr io.Writer, files []string) ([]v1alpha1.ProtectionPolicy, error) {
	var out []v1alpha1.ProtectionPolicy
	for _, name := range files {
		var r io.Reader
		if name == "-" {
			r = stdin
		} else {
			data, err := os.ReadFile(name)
			if err != nil {
				return nil, err
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
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var p v1alpha1.ProtectionPolicy
			if err := yaml.UnmarshalStrict(doc, &p); err != nil {
				// Another kind may have fields ProtectionPolicy lacks:
				// read its kind leniently before calling it malformed.
				var head struct{ APIVersion, Kind string }
				if yaml.Unmarshal(doc, &head) == nil && !isProtectionPolicy(head.APIVersion, head.Kind) {
					fmt.Fprintf(stderr, "%s: document %d: skipping %s %s (only ProtectionPolicies are compiled)\n", name, i, head.APIVersion, head.Kind)
					continue
				}
				return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
			}
			if !isProtectionPolicy(p.APIVersion, p.Kind) {
				fmt.Fprintf(stderr, "%s: document %d: skipping %s %s (only ProtectionPolicies are compiled)\n", name, i, p.APIVersion, p.Kind)
				continue
			}
			if errs := checkPolicy(&p); len(errs) > 0 {
				return nil, fmt.Errorf("%s: document %d: ProtectionPolicy %q: %w", name, i, p.Name, errs.ToAggregate())
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func isProtectionPolicy(apiVersion, kind string) bool {
	return kind == "ProtectionPolicy" && apiVersion == v1alpha1.GroupVersion.String()
}

// checkPolicy checks what the CRD's schema would, that compiling relies on.
func checkPolicy(p *v1alpha1.ProtectionPolicy) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if p.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "a policy needs a name"))
	}
	if len(p.Spec.Resources) == 0 {
		errs = append(errs, field.Required(spec.Child("resources"), "name at least one resource"))
	}
	if p.Spec.Protection == "" && p.Spec.ExplicitReplicas == nil && !p.Spec.ExplicitDeletion {
		errs = append(errs, field.Required(spec, "set protection, explicitReplicas or explicitDeletion"))
	}
	switch p.Spec.Protection {
	case "", v1alpha1.ProtectionAlways, v1alpha1.ProtectionCascading:
	default:
		errs = append(errs, field.NotSupported(spec.Child("protection"), p.Spec.Protection, []string{"Always", "Cascading"}))
	}
	switch p.Spec.Mode {
	case "", v1alpha1.ModeEnforce, v1alpha1.ModeWarn:
	default:
		errs = append(errs, field.NotSupported(spec.Child("mode"), p.Spec.Mode, []string{"Enforce", "Warn"}))
	}
	if r := p.Spec.ExplicitReplicas; r != nil {
		switch r.Guard {
		case "", v1alpha1.GuardAll, v1alpha1.GuardDecrease, v1alpha1.GuardToZero:
		default:
			errs = append(errs, field.NotSupported(spec.Child("explicitReplicas", "guard"), r.Guard, []string{"All", "Decrease", "ToZero"}))
		}
	}
	return errs
}

// writeCompiled prints the compiled policies as one YAML stream, each
// binding after its policy.
func writeCompiled(w io.Writer, policies []v1alpha1.ProtectionPolicy, o exportOptions) error {
	opts := compiled.Options{OwnNamespace: o.rampartNamespace, ReplicasExempt: o.exempt}
	var out []compiled.Policy
	if o.labels {
		out = compiled.LabelRules(opts)
	}
	var left []string
	for i := range policies {
		c := compiled.FromPolicy(&policies[i], opts)
		out = append(out, c...)
		if p := &policies[i]; p.Spec.Protection == v1alpha1.ProtectionCascading {
			left = append(left, fmt.Sprintf("#   ProtectionPolicy %s: protection Cascading", p.Name))
		}
	}
	fmt.Fprintln(w, "# Compiled by `rampart export policies`: Rampart's static rules, enforced by the API server.")
	fmt.Fprintln(w, "# Not compiled (they need Rampart running): Cascading, the scale subresource, custom resources' replicas.")
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
