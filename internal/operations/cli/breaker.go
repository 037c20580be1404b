package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func newBreakerCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	newClient := func() (client.Client, error) { return rampartClient(flags) }
	cmd := &cobra.Command{
		Use:   "breaker",
		Short: "Open, close and show the gateway's circuit breakers (spec.breaker of TrafficPolicies)",
		Long: `breaker opens a TrafficPolicy's circuit breaker by hand: every gateway then
refuses the requests the policy matches at once (429 with Retry-After),
except those an Exempt policy of lower precedence matches. Closing it lets
them back gradually over the policy's spec.breaker.rampSeconds.`,
	}
	var policy string
	setOpen := func(open bool) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			cl, err := newClient()
			if err != nil {
				return err
			}
			return explainRefusal(flags, setBreakerOpen(cmd.Context(), cmd.OutOrStdout(), cl, policy, open))
		}
	}
	open := &cobra.Command{
		Use:   "open --policy NAME",
		Short: "Open a policy's breaker: refuse the requests it matches at once",
		Args:  cobra.NoArgs,
		RunE:  setOpen(true),
	}
	closeCmd := &cobra.Command{
		Use:   "close --policy NAME",
		Short: "Close a policy's breaker, opened by hand or by itself: let its requests back over its ramp",
		Long: `close sets spec.breaker.open to false and spec.breaker.closedAt to now.
Every gateway then lets the policy's requests back over its rampSeconds,
also where the breaker opened by itself on distress (spec.breaker.trip):
it opens by itself again only on distress measured after the close.`,
		Args: cobra.NoArgs,
		RunE: setOpen(false),
	}
	for _, c := range []*cobra.Command{open, closeCmd} {
		c.Flags().StringVar(&policy, "policy", "", "the TrafficPolicy")
		_ = c.MarkFlagRequired("policy")
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each policy's breaker in every gateway: state, reason, since",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := newClient()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			if err := printBreakers(cmd.Context(), tw, cl, true); err != nil {
				return explainRefusal(flags, err)
			}
			return tw.Flush()
		},
	}
	flags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(open, closeCmd, status)
	return cmd
}

// setBreakerOpen sets spec.breaker.open of a policy, creating
// spec.breaker if needed (its other fields take their defaults). A close
// also sets spec.breaker.closedAt, which ends an automatic open too.
func setBreakerOpen(ctx context.Context, out io.Writer, cl client.Client, name string, open bool) error {
	p := &v1alpha1.TrafficPolicy{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no TrafficPolicy %q (kubectl get trafficpolicies lists them)", name)
		}
		return err
	}
	if p.Spec.Action != v1alpha1.ActionLimit {
		return fmt.Errorf("TrafficPolicy %q has action %s: only a policy with action Limit has a breaker. %s",
			name, p.Spec.Action, map[v1alpha1.TrafficAction]string{
				v1alpha1.ActionExempt: "Its requests are exempt from every guard; to refuse them, give the requests a Limit policy of lower precedence, or change this one's action to Limit.",
				v1alpha1.ActionReject: "It already refuses every request it matches.",
				v1alpha1.ActionRoute:  "It sends its requests, unguarded, to the API servers of its pool (route.pool), which keep a storm off the others; onUnavailable says what happens when they are down.",
			}[p.Spec.Action])
	}
	if !open && p.Spec.Breaker == nil {
		return fmt.Errorf("TrafficPolicy %q has no breaker to close", name)
	}
	if open {
		if p.Spec.Breaker != nil && p.Spec.Breaker.Open {
			fmt.Fprintf(out, "TrafficPolicy %s: breaker already open by hand.\n", name)
			return nil
		}
		if err := cl.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"breaker":{"open":true}}}`))); err != nil {
			return err
		}
		fmt.Fprintf(out, "TrafficPolicy %s: breaker opened; the gateways refuse its requests at once. Close it with: rampart gateway breaker close --policy %s\n", name, name)
		return nil
	}
	// Which gateways had it open by themselves, as they last reported.
	var tripped []string
	for _, b := range p.Status.Breakers {
		if b.State == v1alpha1.BreakerOpen && !p.Spec.Breaker.Open {
			tripped = append(tripped, b.Gateway)
		}
	}
	wasOpen := p.Spec.Breaker.Open
	// closedAt is set even when no gateway reports an open breaker: a
	// report may lag, and the close must reach every replica.
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"breaker": map[string]any{"open": false, "closedAt": metav1.Now()}}})
	if err != nil {
		return err
	}
	if err := cl.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	ramp := fmt.Sprintf("its requests come back over %ds", p.Spec.Breaker.RampSeconds)
	switch {
	case wasOpen:
		fmt.Fprintf(out, "TrafficPolicy %s: breaker closed; %s.\n", name, ramp)
	case len(tripped) > 0:
		fmt.Fprintf(out, "TrafficPolicy %s: breaker closed; it had opened by itself on distress in gateway(s) %s: %s. It opens by itself again only on distress measured from now.\n",
			name, strings.Join(tripped, ", "), ramp)
	default:
		fmt.Fprintf(out, "TrafficPolicy %s: breaker was not open by hand, and no gateway reports it open by itself; the gateways forget the distress measured so far.\n", name)
	}
	return nil
}

// printBreakers writes a table of the policies with a breaker and each
// gateway's state of it; all false leaves out Closed ones.
func printBreakers(ctx context.Context, tw io.Writer, cl client.Client, all bool) error {
	var list v1alpha1.TrafficPolicyList
	if err := cl.List(ctx, &list); err != nil {
		return err
	}
	fmt.Fprintln(tw, "POLICY\tOPEN BY HAND\tGATEWAY\tSTATE\tSINCE\tREASON")
	rows := 0
	for _, p := range list.Items {
		if p.Spec.Breaker == nil {
			continue
		}
		if len(p.Status.Breakers) == 0 && (all || p.Spec.Breaker.Open) {
			fmt.Fprintf(tw, "%s\t%t\t-\t-\t-\t(no gateway has reported)\n", p.Name, p.Spec.Breaker.Open)
			rows++
		}
		for _, b := range p.Status.Breakers {
			if !all && b.State == v1alpha1.BreakerClosed && !p.Spec.Breaker.Open {
				continue
			}
			fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s ago\t%s\n", p.Name, p.Spec.Breaker.Open, b.Gateway, b.State,
				duration.HumanDuration(time.Since(b.Since.Time)), dash(b.Reason))
			rows++
		}
	}
	if rows == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	return nil
}
