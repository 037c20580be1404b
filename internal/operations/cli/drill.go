package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/rampart-io/rampart/internal/operations/drill"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

func newDrillCommand() *cobra.Command {
	var kubeconfig, jsonOut, dir string
	var scale int
	cmd := &cobra.Command{
		Use:   "drill [NAME...]",
		Short: "Replay the incidents of the field reports and time everyday operations, unprotected and protected",
		Long: `drill replays incidents from the ByteDance, OpenKruise and Pinterest reports
against a real cluster, once without Rampart's protection and once with it,
and prints the loss of each:

` + drillList() + `
Then it runs everyday operations on both and prints their times, the bound
under protection (1.1× the unprotected time plus 5 s) and what Rampart
refused that should have passed; the protected side carries what a user of
Rampart applies (budgets, explicit-replicas labels, protected key objects,
a flow control on pod deletes):

` + operationList() + `
Without --kubeconfig it starts two local clusters (one without Rampart, one
with it) for the incidents, and two more, with the chart's defaults, for
the operations, and stops them afterwards. With --kubeconfig it runs both
sides in that cluster, which must run Rampart: the unprotected side simply
does not ask for protection (the operations that restart or uninstall
Rampart need the local clusters). It exits non-zero if more was lost under
protection than the protection allows (nothing, or a flow control's limit),
or if an operation missed its bound.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			drills, ops, err := drill.Select(args)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var results []drill.Result
			var opResults []drill.OperationResult
			if len(drills) > 0 {
				unprotected, protected, stop, err := drillTargets(cmd.Context(), kubeconfig, dir, scale, incidentClusters(drills, scale), out)
				if err != nil {
					return err
				}
				results, err = drill.Run(cmd.Context(), drills, unprotected, protected, cmd.ErrOrStderr())
				stop()
				if len(results) > 0 {
					fmt.Fprintln(out)
					if werr := drill.WriteTable(out, results); werr != nil {
						return werr
					}
				}
				if err != nil {
					return errors.Join(err, writeReport(jsonOut, out, results, nil))
				}
			}
			if len(ops) > 0 {
				opsDir := dir
				if dir != "" {
					opsDir = filepath.Join(dir, "operations")
				}
				unprotected, protected, stop, err := drillTargets(cmd.Context(), kubeconfig, opsDir, scale, drill.OperationsCluster, out)
				if err != nil {
					return err
				}
				opResults, err = drill.RunOperations(cmd.Context(), ops, unprotected, protected, cmd.ErrOrStderr())
				stop()
				if len(opResults) > 0 {
					fmt.Fprintln(out)
					if werr := drill.WriteOperationsTable(out, opResults); werr != nil {
						return werr
					}
				}
				if err != nil {
					return errors.Join(err, writeReport(jsonOut, out, results, opResults))
				}
			}
			if err := writeReport(jsonOut, out, results, opResults); err != nil {
				return err
			}
			var failed, over []string
			for _, r := range results {
				if r.Protected.Lost > r.Protected.Bound {
					failed = append(failed, r.Drill)
				}
				over = append(over, r.OverBounds()...)
			}
			var problems []string
			if len(failed) > 0 {
				problems = append(problems, "loss under protection in: "+strings.Join(failed, ", "))
			}
			if len(over) > 0 {
				problems = append(problems, "figures over their bound under protection: "+strings.Join(over, "; "))
			}
			if slow := drill.OperationsFailed(opResults); len(slow) > 0 {
				problems = append(problems, "operations over their bound under protection: "+strings.Join(slow, ", "))
			}
			if len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "run in this cluster (which runs Rampart) instead of local ones")
	f.StringVar(&jsonOut, "json", "", "also write the JSON report to this file ('-' for standard output)")
	f.IntVar(&scale, "scale", 1, "divide each drill's size by this, for a quick run")
	f.StringVar(&dir, "dir", "", "directory for the local clusters' state and logs (default: a temporary one, removed afterwards)")
	return cmd
}

// incidentClusters are the options of the incident drills' local
// clusters: both run a gateway, the meta-cluster drill wants one
// simulated node per custom resource, and stateful-maintenance a pool of
// nodes to drain half of.
func incidentClusters(drills []drill.Drill, scale int) func(protected bool) localcluster.Options {
	nodes := 3
	if slices.ContainsFunc(drills, func(d drill.Drill) bool { return d.Name == "crd-deletion" }) {
		nodes = max(1000/max(scale, 1), 3)
	}
	if slices.ContainsFunc(drills, func(d drill.Drill) bool { return d.Name == "stateful-maintenance" }) {
		nodes = max(nodes, drill.StatefulMaintenanceNodes(scale))
	}
	// The node water level is exact across replicas through its ledger:
	// its storms run against three.
	managers := 1
	if slices.ContainsFunc(drills, func(d drill.Drill) bool { return strings.HasPrefix(d.Name, "node-offlining-") }) {
		managers = 3
	}
	return func(protected bool) localcluster.Options {
		return localcluster.Options{Nodes: nodes, Unprotected: !protected, Gateway: true, CustomResourceGroups: drill.CustomResourceGroups, Managers: managers}
	}
}

func drillList() string {
	var b strings.Builder
	for _, d := range drill.All() {
		fmt.Fprintf(&b, "  %-22s %s\n", d.Name, d.Incident)
	}
	return b.String()
}

func operationList() string {
	var b strings.Builder
	for _, o := range drill.Everyday() {
		fmt.Fprintf(&b, "  %-23s %s\n", o.Name, o.What)
	}
	return b.String()
}

// writeReport writes the JSON report to path, if one was asked for.
func writeReport(path string, stdout io.Writer, results []drill.Result, ops []drill.OperationResult) error {
	switch path {
	case "":
		return nil
	case "-":
		return drill.WriteJSON(stdout, results, ops)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := drill.WriteJSON(f, results, ops); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// drillTargets are the two sides of the drills: two local clusters, or
// one given cluster used twice.
func drillTargets(ctx context.Context, kubeconfig, dir string, scale int, options func(protected bool) localcluster.Options, progress io.Writer) (unprotected, protected drill.Target, stop func(), err error) {
	run := strings.ToLower(rand.String(5))
	if kubeconfig != "" {
		cfg, err := restConfig(kubeconfig)
		if err != nil {
			return drill.Target{}, drill.Target{}, nil, err
		}
		if unprotected, err = drill.NewTarget(cfg, false, "u"+run, scale); err != nil {
			return drill.Target{}, drill.Target{}, nil, err
		}
		protected, err = drill.NewTarget(cfg, true, "p"+run, scale)
		return unprotected, protected, func() {}, err
	}
	keep := dir != ""
	if !keep {
		if dir, err = os.MkdirTemp("", "rampart-drill-"); err != nil {
			return drill.Target{}, drill.Target{}, nil, err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return drill.Target{}, drill.Target{}, nil, err
	}
	var clusters []*localcluster.Cluster
	stop = func() {
		for _, c := range clusters {
			_ = c.Stop()
		}
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}
	for _, side := range []struct {
		protected bool
		target    *drill.Target
	}{{false, &unprotected}, {true, &protected}} {
		name := map[bool]string{false: "unprotected", true: "protected"}[side.protected]
		opts := options(side.protected)
		opts.Dir, opts.Assets, opts.Rampart = filepath.Join(dir, name), defaultAssets(), exe
		fmt.Fprintf(progress, "Starting the %s cluster (%d simulated nodes)...\n", name, opts.Nodes)
		c, err := localcluster.Start(ctx, opts)
		if err != nil {
			stop()
			return drill.Target{}, drill.Target{}, nil, fmt.Errorf("%s cluster: %w", name, err)
		}
		clusters = append(clusters, c)
		if *side.target, err = drill.NewTarget(c.Config, side.protected, name[:1]+run, scale); err != nil {
			stop()
			return drill.Target{}, drill.Target{}, nil, err
		}
		side.target.Local = c
	}
	return unprotected, protected, stop, nil
}
