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
	"github.com/rampart-io/rampart/internal/servers/manager/controller/budgetstatus"
)

func newPUBCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pub",
		Short: "PodUnavailableBudgets: what they allow now",
	}
	flags := genericclioptions.NewConfigFlags(true)
	var all bool
	var denials int
	status := &cobra.Command{
		Use:   "status",
		Short: "List budgets, the disruptions each allows now, and recent denials",
		Long: `status lists the PodUnavailableBudgets of a namespace (-n, or the
kubeconfig's; -A for all): the pods each covers, how many are available,
the floor it keeps, how many more disruptions it allows now and the
disruptions admitted but not yet seen, and marks a budget that can never
allow one (maxUnavailable 0, or minAvailable at or above its pods: drains
and rollouts of its pods never finish); then the most recent disruptions
it refused (from Rampart's DisruptionDenied Events).`,
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
			return printPUBStatus(cmd.Context(), cmd.OutOrStdout(), cfg, ns, denials)
		},
	}
	flags.AddFlags(status.Flags())
	status.Flags().BoolVarP(&all, "all-namespaces", "A", false, "budgets of every namespace")
	status.Flags().IntVar(&denials, "denials", 10, "how many recent denials to show")
	cmd.AddCommand(status)
	return cmd
}

func printPUBStatus(ctx context.Context, out io.Writer, cfg *rest.Config, ns string, maxDenials int) error {
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
