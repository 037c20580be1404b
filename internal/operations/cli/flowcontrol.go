package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/flowcontrol"
)

func newFlowControlCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	newClient := func() (client.Client, error) { return rampartClient(flags) }
	cmd := &cobra.Command{
		Use:   "flowcontrol",
		Short: "Inspect and reset DeletionFlowControls",
	}
	status := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show each flow control's counts, breaker and recently denied requesters",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient()
			if err != nil {
				return err
			}
			var list v1alpha1.DeletionFlowControlList
			if err := cl.List(cmd.Context(), &list); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tMODE\tSTATE")
			found := false
			for _, f := range list.Items {
				if len(args) == 1 && f.Name != args[0] {
					continue
				}
				found = true
				fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, f.Spec.Mode, flowcontrol.Describe(f.Spec, f.Status, time.Now()))
				for _, d := range f.Status.RecentDenied {
					fmt.Fprintf(tw, "\t\tdenied %s: %s at %s\n", d.User, d.Object, d.Time.UTC().Format(time.RFC3339))
				}
			}
			if len(args) == 1 && !found {
				return fmt.Errorf("no DeletionFlowControl %q", args[0])
			}
			return tw.Flush()
		},
	}
	reset := &cobra.Command{
		Use:   "reset NAME",
		Short: "Close a tripped breaker and clear the counts: the deletions are intended",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := newClient()
			if err != nil {
				return err
			}
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				f := &v1alpha1.DeletionFlowControl{}
				if err := cl.Get(cmd.Context(), client.ObjectKey{Name: args[0]}, f); err != nil {
					return err
				}
				flowcontrol.Reset(&f.Status)
				flowcontrol.SyncCondition(&f.Status, f.Generation)
				return cl.Status().Update(cmd.Context(), f)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "DeletionFlowControl %s reset: breaker closed, counts cleared.\n", args[0])
			return nil
		},
	}
	flags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(status, reset)
	return cmd
}
