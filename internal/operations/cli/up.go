package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// defaultAssets is bin/k8s beside the running binary (bin/rampart), where
// `make assets` puts the Kubernetes binaries; RAMPART_ASSETS overrides it.
func defaultAssets() string {
	if d := os.Getenv("RAMPART_ASSETS"); d != "" {
		return d
	}
	exe, err := os.Executable()
	if err != nil {
		return filepath.Join("bin", "k8s")
	}
	return filepath.Join(filepath.Dir(exe), "k8s")
}

func newUpCommand() *cobra.Command {
	opts := localcluster.Options{Nodes: 3, EtcdSpace: true}
	backups, etcdAuth := false, true
	var pools []string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a real local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes) protected by Rampart",
		Long: `up starts, on this machine, etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok with simulated nodes, plus Rampart's manager (unless
--unprotected), and writes an admin kubeconfig to DIR/kubeconfig. With
--real-nodes N it also starts N real kubelet nodes, each with containerd
and rampart node-guard between them (root, make assets, and Debian's
containerd, containernetworking-plugins and busybox-static needed).

Without --detach it runs until interrupted and then stops everything; with
--detach it returns once the cluster is ready and 'rampart down --dir DIR'
stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			opts.Rampart = exe
			opts.Progress = out
			for _, p := range pools {
				pool, err := localcluster.ParseGatewayPool(p)
				if err != nil {
					return err
				}
				opts.GatewayPools = append(opts.GatewayPools, pool)
			}
			opts.NoEtcdAuth = !etcdAuth
			if backups {
				// Where rampart backup looks by default.
				opts.BackupStore = filepath.Join(opts.Dir, localBackupsDir)
			}
			start := time.Now()
			mode := "protected by Rampart"
			if opts.Unprotected {
				mode = "unprotected"
			}
			fmt.Fprintf(out, "Starting a local cluster (%s) in %s\n", mode, opts.Dir)
			c, err := localcluster.Start(cmd.Context(), opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "\nReady in %.1fs. Kubeconfig: %s\n\n", time.Since(start).Seconds(), c.Kubeconfig)
			if opts.Gateway {
				fmt.Fprintf(out, "Through the gateway (%s): %s\n", c.GatewayURL(), c.GatewayKubeconfig())
				if def, named := c.GatewayPools(); len(named) > 0 {
					fmt.Fprintf(out, "  pool default: %s\n", strings.Join(def, " "))
					for _, p := range named {
						fmt.Fprintf(out, "  pool %s: %s (a TrafficPolicy with action Route and route.pool %s sends requests there)\n", p.Name, strings.Join(p.URLs, " "), p.Name)
					}
				}
				fmt.Fprintln(out)
			}
			fmt.Fprintf(out, "  export KUBECONFIG=%s\n", c.Kubeconfig)
			fmt.Fprintf(out, "  kubectl create namespace demo\n")
			fmt.Fprintf(out, "  kubectl label namespace demo rampart.io/protection=Always\n")
			fmt.Fprintf(out, "  kubectl delete namespace demo    # denied by Rampart, with the way to proceed\n\n")
			if nodes := c.RealNodes(); len(nodes) > 0 {
				fmt.Fprintf(out, "Real nodes %v run the image %s (imagePullPolicy: Never); each one's kubelet talks to containerd through rampart node-guard.\n\n", nodes, localcluster.RealNodeImage)
			}
			if !opts.Unprotected {
				// As in a cluster: HTTPS, for callers allowed to get /metrics.
				fmt.Fprintf(out, "The manager's metrics (HTTPS, for rampart-metrics-reader, which %s/%s is bound to):\n", localcluster.ManagerNamespace, localcluster.MetricsScraper)
				fmt.Fprintf(out, "  curl --cacert %s -H \"Authorization: Bearer $(kubectl create token -n %s %s)\" %s\n\n",
					c.PKIFile("ca.crt"), localcluster.ManagerNamespace, localcluster.MetricsScraper, c.MetricsURL())
			}
			if opts.Detached {
				fmt.Fprintf(out, "Stop it with: %s down --dir %s\n", os.Args[0], c.Dir)
				return nil
			}
			fmt.Fprintln(out, "Press Ctrl-C to stop.")
			waitErr := c.Wait(cmd.Context())
			fmt.Fprintln(out, "Stopping...")
			if err := c.Stop(); err != nil {
				return err
			}
			return waitErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Dir, "dir", ".rampart", "directory for the cluster's state, kubeconfig and logs")
	f.BoolVar(&opts.Detached, "detach", false, "return once ready and leave the cluster running")
	f.IntVar(&opts.Nodes, "nodes", 3, "number of simulated (kwok) nodes")
	f.IntVar(&opts.RealNodes, "real-nodes", 0, "number of real kubelet nodes (containerd, runc and rampart node-guard on this machine; needs root and Debian's containerd, containernetworking-plugins and busybox-static, and make assets)")
	f.BoolVar(&opts.Unprotected, "unprotected", false, "start no Rampart manager: a plain cluster, for comparison")
	f.IntVar(&opts.Managers, "managers", 1, "manager replicas; with more than one the API server spreads webhook calls over them")
	f.IntVar(&opts.APIServers, "apiservers", 1, "kube-apiservers on the one etcd")
	f.StringSliceVar(&opts.CustomResourceGroups, "custom-resource-groups", nil, "API groups of custom resources the manager may list and watch (the chart's manager.customResourceGroups)")
	f.BoolVar(&opts.Gateway, "gateway", false, "start rampart gateway in front of the API servers and write DIR/kubeconfig-gateway")
	f.StringSliceVar(&opts.GatewayCountCustomResourceGroups, "gateway-count-custom-resource-groups", nil, "API groups of custom resources the gateway's LIST guard may count per namespace (the chart's gateway.countCustomResourceGroups); others are priced by their cluster-wide count")
	f.StringArrayVar(&pools, "gateway-pool", nil, "NAME=N: the last N API servers (of --apiservers, not given to an earlier --gateway-pool) form the gateway's pool NAME, which only TrafficPolicies with action Route naming it reach; the rest stay in the default pool (e.g. --apiservers 3 --gateway-pool heavy=1)")
	f.BoolVar(&opts.ComponentsViaGateway, "components-via-gateway", false, "point kube-controller-manager, kube-scheduler and kwok at the gateway (with --gateway)")
	f.BoolVar(&backups, "backups", false, "run Backup objects of "+localcluster.ManagerNamespace+" into DIR/backups (the manager may then read every resource, as with the chart's manager.backup), etcd snapshots included, with the local etcd's root certificate in Secret "+localcluster.EtcdSnapshotSecret+" (only etcd's root may take a snapshot once its authentication is on)")
	f.BoolVar(&opts.EtcdSpace, "etcd-space", true, "the manager watches etcd's space with a read-only etcd identity in Secret "+localcluster.EtcdSpaceSecret+" (the chart's manager.etcdSpace.secretName): rampart_etcd_* metrics, rampart status's ETCD SPACE")
	f.BoolVar(&etcdAuth, "etcd-auth", true, "turn etcd's authentication on (not with --unprotected): only the API server's certificate may write /registry/, etcd compacts itself; DIR/pki/etcd-root.crt is root's, for rampart etcd snapshot and space recover (docs/etcd.md, \"Only the API server writes etcd\")")
	f.StringVar(&opts.Assets, "assets", defaultAssets(), "directory with the binaries `make assets` builds")
	return cmd
}

func newDownCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop exactly the processes 'rampart up' started in DIR",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := localcluster.Stop(dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Stopped the local cluster in %s.\n", dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".rampart", "directory given to 'rampart up'")
	return cmd
}
