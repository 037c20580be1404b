package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/nodebudget"
)

func newStatusCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	var denials int
	var rampartNamespace string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List what Rampart protects and what it denied recently",
		Long: `status lists the objects labelled for protection, the ProtectionPolicies
with their state, the compiled policies (rampart export policies) with
how often each denied or warned (the API server's own count), the
namespaces closest to their ResourceQuotas, the recycle bin (what it
holds, its RecyclePolicies), the Backups (last run, result, next run;
LATE, FAILING or NOT READY flagged) and the most recent denials (from
Rampart's Events).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return err
			}
			// One list per resource kind: a human is waiting, and the
			// deprecation warnings of old kinds are not theirs to act on.
			cfg.QPS, cfg.Burst = 100, 200
			cfg.WarningHandler = rest.NoWarnings{}
			return printStatus(cmd.Context(), cmd.OutOrStdout(), cfg, denials, rampartNamespace)
		},
	}
	flags.AddFlags(cmd.Flags())
	cmd.Flags().IntVar(&denials, "denials", 20, "how many recent denials to show")
	cmd.Flags().StringVar(&rampartNamespace, "rampart-namespace", "rampart-system", "Rampart's namespace, where the manager publishes the recycle bin's summary and runs Backups")
	return cmd
}

func printStatus(ctx context.Context, out io.Writer, cfg *rest.Config, maxDenials int, rampartNamespace string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)

	fmt.Fprintln(tw, "PROTECTED OBJECTS (by label)")
	fmt.Fprintln(tw, "RESOURCE\tNAMESPACE\tNAME\tPROTECTION\tEXPLICIT-REPLICAS")
	rows, err := labelledObjects(ctx, cs.Discovery(), md)
	if err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(none)")
	}

	fmt.Fprintln(tw, "\nPROTECTION POLICIES")
	fmt.Fprintln(tw, "NAME\tRESOURCES\tPROTECTION\tEXPLICIT-REPLICAS\tMODE\tREADY")
	var policies v1alpha1.ProtectionPolicyList
	if err := cl.List(ctx, &policies); err != nil {
		fmt.Fprintf(tw, "(cannot list: %v)\n", err)
	}
	for _, p := range policies.Items {
		var res []string
		for _, r := range p.Spec.Resources {
			for _, name := range r.Resources {
				res = append(res, schema.GroupResource{Group: strings.Join(r.APIGroups, "|"), Resource: name}.String())
			}
		}
		guard := "-"
		if p.Spec.ExplicitReplicas != nil {
			guard = string(p.Spec.ExplicitReplicas.Guard)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, strings.Join(res, ","), dash(string(p.Spec.Protection)), guard, p.Spec.Mode, readyOf(p.Status.Conditions))
	}
	if len(policies.Items) == 0 {
		fmt.Fprintln(tw, "(none)")
	}

	fmt.Fprintln(tw, "\nCOMPILED POLICIES (enforced by the API server, no webhook)")
	if err := printCompiled(ctx, tw, cs); err != nil {
		fmt.Fprintf(tw, "(cannot list: %v)\n", err)
	}

	fmt.Fprintln(tw, "\nCHANGE WINDOWS")
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tOPEN\tNEXT OPEN\tNEXT CLOSE\tZONE\tFIELDS")
	var windows v1alpha1.ChangeWindowList
	if err := cl.List(ctx, &windows); err != nil {
		fmt.Fprintf(tw, "(cannot list: %v)\n", err)
	}
	for _, w := range windows.Items {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\n", w.Namespace, w.Name, w.Status.Open,
			timeOrDash(w.Status.NextOpen), timeOrDash(w.Status.NextClose), dash(w.Spec.TimeZone), strings.Join(w.Spec.Fields, ","))
	}
	if len(windows.Items) == 0 {
		fmt.Fprintln(tw, "(none)")
	}

	fmt.Fprintln(tw, "\nNODE DISRUPTION BUDGETS")
	fmt.Fprintln(tw, "NAME\tNODE SELECTOR\tWATER LEVEL\tLAST DENIED\tREADY")
	var nodeBudgets v1alpha1.NodeDisruptionBudgetList
	if err := cl.List(ctx, &nodeBudgets); err != nil {
		fmt.Fprintf(tw, "(cannot list: %v)\n", err)
	}
	for _, b := range nodeBudgets.Items {
		denied := "-"
		if len(b.Status.RecentDenied) > 0 {
			d := b.Status.RecentDenied[0]
			denied = fmt.Sprintf("%s by %s at %s", d.Object, d.User, d.Time.UTC().Format(time.RFC3339))
		}
		sel := "(every node)"
		if b.Spec.NodeSelector != nil {
			sel = metav1.FormatLabelSelector(b.Spec.NodeSelector)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Name, sel,
			dash(nodebudget.Describe(b.Spec, b.Status, time.Now())), denied, readyOf(b.Status.Conditions))
	}
	if len(nodeBudgets.Items) == 0 {
		fmt.Fprintln(tw, "(none)")
	}

	fmt.Fprintln(tw, "\nNAMESPACES CLOSEST TO THEIR QUOTAS")
	if err := closestToQuota(ctx, tw, cs, 10); err != nil {
		fmt.Fprintf(tw, "(cannot list: %v)\n", err)
	}

	fmt.Fprintln(tw, "\nGATEWAY BREAKERS (not closed)")
	if err := printBreakers(ctx, tw, cl, false); err != nil {
		fmt.Fprintf(tw, "(cannot list: %v)\n", err)
	}

	fmt.Fprintln(tw, "\nRECYCLE BIN")
	printRecycleBin(ctx, tw, cs, cl, rampartNamespace)

	fmt.Fprintln(tw, "\nBACKUPS")
	printBackups(ctx, tw, cl, rampartNamespace, time.Now())

	fmt.Fprintln(tw, "\nETCD SPACE")
	printEtcdSpace(ctx, tw, cs, rampartNamespace)

	fmt.Fprintln(tw, "\nRECENT DENIALS AND OVERRIDES")
	fmt.Fprintln(tw, "AGE\tOBJECT\tREASON\tNOTE")
	evs, err := cs.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reportingController=rampart"})
	if err != nil {
		return err
	}
	items := slices.DeleteFunc(evs.Items, func(e eventsv1.Event) bool {
		return !strings.HasSuffix(e.Reason, "Denied") && e.Reason != "ChangeOverride"
	})
	sort.Slice(items, func(i, j int) bool { return eventTime(items[i]).After(eventTime(items[j])) })
	for _, e := range items[:min(len(items), maxDenials)] {
		obj := strings.ToLower(e.Regarding.Kind) + "/" + e.Regarding.Name
		if e.Regarding.Namespace != "" {
			obj = e.Regarding.Namespace + "/" + obj
		}
		note := e.Note
		if len(note) > 140 {
			note = note[:140] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", duration.HumanDuration(time.Since(eventTime(e))), obj, e.Reason, note)
	}
	if len(items) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	return tw.Flush()
}

func eventTime(e eventsv1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func timeOrDash(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// readyOf is the status of a Ready condition, Unknown without one.
func readyOf(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, "Ready"); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// labelledObjects lists, across every listable resource, the objects that
// carry Rampart's labels (metadata only).
func labelledObjects(ctx context.Context, disc discovery.DiscoveryInterface, md metadata.Interface) ([]string, error) {
	lists, err := disc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	seen := map[string]bool{}
	var rows []string
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			for _, key := range []string{v1alpha1.LabelProtection, v1alpha1.LabelExplicitReplicas} {
				objs, err := md.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: key})
				if err != nil {
					continue
				}
				for _, o := range objs.Items {
					id := gv.WithResource(r.Name).GroupResource().String() + "\t" + dash(o.Namespace) + "\t" + o.Name
					if seen[id] {
						continue
					}
					seen[id] = true
					rows = append(rows, id+"\t"+dash(o.Labels[v1alpha1.LabelProtection])+"\t"+dash(o.Labels[v1alpha1.LabelExplicitReplicas]))
				}
			}
		}
	}
	slices.Sort(rows)
	return rows, nil
}
