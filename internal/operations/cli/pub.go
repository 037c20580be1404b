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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/budget"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/budgetstatus"
)

func newPUBCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pub",
		Short: "PodUnavailableBudgets: what they allow now",
	}
	flags := genericclioptions.NewConfigFlags(true)
	var all bool
	var denials, groups int
	status := &cobra.Command{
		Use:   "status",
		Short: "List budgets, the disruptions each allows now, and recent denials",
		Long: `status lists the PodUnavailableBudgets of a namespace (-n, or the
kubeconfig's; -A for all): the pods each covers, how many are available,
the floor it keeps, how many more disruptions it allows now and the
disruptions admitted but not yet seen, and marks a budget that can never
allow one (maxUnavailable 0, or minAvailable at or above its pods: drains
and rollouts of its pods never finish); for budgets with groupBy, the
groups closest to their floor (the disrupted ones; --groups); then the
most recent disruptions it refused (from Rampart's DisruptionDenied
Events).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return err
			}
			ns := ""
			if !all {
				if ns, _, err = flags.ToRawKubeConfigLoader().Namespace(); err != nil {
					return err
				}
			}
			return printPUBStatus(cmd.Context(), cmd.OutOrStdout(), cfg, ns, denials, groups)
		},
	}
	flags.AddFlags(status.Flags())
	status.Flags().BoolVarP(&all, "all-namespaces", "A", false, "budgets of every namespace")
	status.Flags().IntVar(&denials, "denials", 10, "how many recent denials to show")
	status.Flags().IntVar(&groups, "groups", 5, "how many groups closest to their floor to show per budget with groupBy")
	cmd.AddCommand(status)
	return cmd
}

// printPUBGroups lists, for the budgets with groupBy, the groups closest
// to their floor (the status lists the disrupted ones, closest first).
func printPUBGroups(tw io.Writer, budgets []v1alpha1.PodUnavailableBudget, maxGroups int) {
	header := false
	for _, b := range budgets {
		if b.Spec.GroupBy == nil {
			continue
		}
		if !header {
			fmt.Fprintln(tw, "\nGROUPS CLOSEST TO THEIR FLOOR")
			fmt.Fprintln(tw, "BUDGET\tGROUPS\tDISRUPTED\tGROUP\tTOTAL\tAVAILABLE\tDESIRED\tALLOWED\tIN PROGRESS")
			header = true
		}
		st := b.Status
		disrupted := fmt.Sprint(st.DisruptedGroups)
		if c := b.Spec.MaxGroupsDisrupted; c != nil {
			disrupted += fmt.Sprintf(" (at most %d)", *c)
		}
		if b.Spec.Gang {
			disrupted += ", gang"
		}
		name := b.Namespace + "/" + b.Name
		if len(st.GroupStatus) == 0 {
			fmt.Fprintf(tw, "%s\t%d\t%s\t(every group whole)\t\t\t\t\t\n", name, st.Groups, disrupted)
			continue
		}
		groups := fmt.Sprint(st.Groups)
		for i, g := range st.GroupStatus[:min(len(st.GroupStatus), maxGroups)] {
			if i > 0 {
				name, groups, disrupted = "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s=%s\t%d\t%d\t%d\t%d\t%d\n", name, groups, disrupted, b.Spec.GroupBy.LabelKey, g.Name,
				g.Total, g.Available, g.Desired, g.Allowed, g.Disruptions)
		}
		if more := int(st.DisruptedGroups) - min(len(st.GroupStatus), maxGroups); more > 0 {
			fmt.Fprintf(tw, "\t\t\t(%d more disrupted groups: --groups %d)\t\t\t\t\t\n", more, st.DisruptedGroups)
		}
	}
}

func printPUBStatus(ctx context.Context, out io.Writer, cfg *rest.Config, ns string, maxDenials, maxGroups int) error {
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var list v1alpha1.PodUnavailableBudgetList
	if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing PodUnavailableBudgets: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tCOVERS\tTOTAL\tAVAILABLE\tDESIRED\tALLOWED\tIN PROGRESS\tREADY")
	for _, b := range list.Items {
		if b.Labels[budget.FenceLabel] == "true" {
			continue // the manager's fence, no budget (see docs/budgets.md)
		}
		covers := b.Status.Selector
		if b.Spec.Selector != nil {
			covers = metav1.FormatLabelSelector(b.Spec.Selector)
		}
		if b.Spec.TargetRef != nil {
			covers = b.Spec.TargetRef.Kind + "/" + b.Spec.TargetRef.Name
		}
		ready := "Unknown"
		for _, c := range b.Status.Conditions {
			if c.Type == "Ready" {
				ready = string(c.Status)
				if c.Status != metav1.ConditionTrue {
					ready += ": " + c.Message
				}
			}
		}
		if c := meta.FindStatusCondition(b.Status.Conditions, budgetstatus.BlocksAllCondition); c != nil && c.Status == metav1.ConditionTrue {
			why, _, _ := strings.Cut(c.Message, ":")
			ready += "; NEVER ALLOWS A DISRUPTION: " + strings.TrimPrefix(why, "the budget allows no disruption at any time ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", b.Namespace, b.Name, dash(covers), b.Status.TotalReplicas,
			b.Status.CurrentAvailable, b.Status.DesiredAvailable, b.Status.UnavailableAllowed, len(b.Status.Disruptions), ready)
	}
	if len(list.Items) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	printPUBGroups(tw, list.Items, maxGroups)
	fmt.Fprintln(tw, "\nRECENT DENIED DISRUPTIONS")
	fmt.Fprintln(tw, "AGE\tPOD\tNOTE")
	evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reportingController=rampart,reason=DisruptionDenied"})
	if err != nil {
		return err
	}
	items := slices.Clone(evs.Items)
	sort.Slice(items, func(i, j int) bool { return eventTime(items[i]).After(eventTime(items[j])) })
	for _, e := range items[:min(len(items), maxDenials)] {
		note := e.Note
		if i := strings.Index(note, ": pod "); i >= 0 {
			note = note[i+2:]
		}
		if len(note) > 160 {
			note = note[:160] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\n", duration.HumanDuration(time.Since(eventTime(e))), e.Regarding.Namespace, e.Regarding.Name, note)
	}
	if len(items) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	return tw.Flush()
}
