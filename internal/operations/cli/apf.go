package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/internal/operations/apf"
)

func newAPFCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apf",
		Short: "Check what the API server's API Priority and Fairness does with the cluster's clients",
	}
	cmd.AddCommand(newAPFCheckCommand())
	return cmd
}

func newAPFCheckCommand() *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	var (
		auditLogs []string
		noMetrics bool
		output    string
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "List clients on global-default or catch-all, clients exempt that should not be, and levels that rejected requests",
		Long: `check reads what the cluster's API Priority and Fairness does today.

With --audit-log, it classifies every request of the audit logs against the
cluster's own FlowSchemas and PriorityLevelConfigurations, as APF does (by
the user the API server authorised: an impersonated user, not its proxy).
kube-apiserver does not write a request's flow schema to the audit log (it
writes apf_fs and apf_pl to its HTTP log at -v=3, and UIDs to the
X-Kubernetes-PF-* response headers), so the classification is Rampart's,
held to the API server's own by its tests. It lists clients that land on
global-default or catch-all (nobody chose their level) and clients exempt
that are neither system:masters nor the control plane.

It also reads the APF metrics of the API server the kubeconfig reaches
(apiserver_flowcontrol_rejected_requests_total, _current_inqueue_requests,
_dispatched_requests_total on /metrics, which the kubeconfig's rights must
allow) and lists the levels that rejected requests or are queuing now.
Behind a load balancer that is one API server of several: run it against
each (--server).`,
		Example: `  rampart apf check --audit-log /var/log/kube-apiserver/audit.log
  rampart apf check --no-metrics --audit-log audit.log -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: use text or json", output)
			}
			if noMetrics && len(auditLogs) == 0 {
				return errors.New("--no-metrics without --audit-log: nothing to check")
			}
			cfg, err := flags.ToRESTConfig()
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			var clients []apf.AuditClient
			if len(auditLogs) > 0 {
				current, err := apf.ReadCluster(cmd.Context(), cs)
				if err != nil {
					return err
				}
				a := apf.NewAudit(current)
				for _, f := range auditLogs {
					if _, err := readLog(f, 0, a.Add); err != nil {
						return err
					}
				}
				clients = a.Clients()
			}
			var metrics []apf.LevelMetrics
			if !noMetrics {
				if metrics, err = apf.ReadMetrics(cmd.Context(), cs); err != nil {
					return fmt.Errorf("%w (--no-metrics checks the audit log alone)", err)
				}
			}
			findings := apf.Check(clients, metrics)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"clients": clients, "levels": metrics, "findings": findings})
			}
			apf.WriteCheck(cmd.OutOrStdout(), clients, findings)
			return nil
		},
	}
	flags.AddFlags(cmd.Flags())
	cmd.Flags().StringSliceVar(&auditLogs, "audit-log", nil, "kube-apiserver audit logs to classify (FILE.gz is read compressed; - is stdin; repeat or separate with commas)")
	cmd.Flags().BoolVar(&noMetrics, "no-metrics", false, "do not read the API server's /metrics")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}
