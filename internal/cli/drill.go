package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/rampart-io/rampart/internal/drill"
	"github.com/rampart-io/rampart/internal/localcluster"
)

func newDrillCommand() *cobra.Command {
	var kubeconfig, jsonOut, dir string
	var scale int
	cmd := &cobra.Command{
		Use:   "drill [NAME...]",
		Short: "Replay the incidents of the field reports, unprotected and protected, and measure the loss",
		Long: `drill replays incidents from the ByteDance, OpenKruise and Pinterest reports
against a real cluster, once without Rampart's protection and once with it,
and prints the loss of each:

` + drillList() + `
Without --kubeconfig it starts two local clusters (one without Rampart, one
with it) and stops them afterwards. With --kubeconfig it runs both sides in
that cluster, which must run Rampart: the unprotected side simply does not
ask for protection. It exits non-zero if more was lost under protection than the protection
allows (nothing, or a flow control's limit).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			drills, err := drill.Select(args)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			unprotected, protected, stop, err := drillTargets(cmd.Context(), kubeconfig, dir, scale, drills, out)
			if err != nil {
				return err
			}
			defer stop()
			results, err := drill.Run(cmd.Context(), drills, unprotected, protected, cmd.ErrOrStderr())
			if len(results) > 0 {
				fmt.Fprintln(out)
				if werr := drill.WriteTable(out, results); werr != nil {
					return werr
				}
			}
			if jsonOut != "" {
				if werr := writeReport(jsonOut, out, results); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			var failed []string
			for _, r := range results {
				if r.Protected.Lost > r.Protected.Bound {
					failed = append(failed, r.Drill)
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("loss under protection in: %s", strings.Join(failed, ", "))
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

func drillList() string {
	var b strings.Builder
	for _, d := range drill.All() {
		fmt.Fprintf(&b, "  %-22s %s\n", d.Name, d.Incident)
	}
	return b.String()
}

func writeReport(path string, stdout io.Writer, results []drill.Result) error {
	if path == "-" {
		return drill.WriteJSON(stdout, results)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := drill.WriteJSON(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// drillTargets are the two sides of the drills: two local clusters, or
// one given cluster used twice.
func drillTargets(ctx context.Context, kubeconfig, dir string, scale int, drills []drill.Drill, progress io.Writer) (unprotected, protected drill.Target, stop func(), err error) {
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
	// The meta-cluster drill wants one simulated node per custom resource.
	nodes := 3
	if slices.ContainsFunc(drills, func(d drill.Drill) bool { return d.Name == "crd-deletion" }) {
		nodes = max(1000/max(scale, 1), 3)
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
		fmt.Fprintf(progress, "Starting the %s cluster (%d simulated nodes)...\n", name, nodes)
		c, err := localcluster.Start(ctx, localcluster.Options{
			Dir: filepath.Join(dir, name), Assets: defaultAssets(), Rampart: exe,
			Nodes: nodes, Unprotected: !side.protected, Gateway: true,
			CustomResourceGroups: drill.CustomResourceGroups,
		})
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
