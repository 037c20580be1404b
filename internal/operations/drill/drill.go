// Package drill replays the incidents of the seed reports against a real
// cluster, once without Rampart's protection and once with it, and
// measures what was lost; and it times everyday operations on both, to show
// that Rampart does no harm (everyday.go). `rampart drill` runs them; so
// does `make test`.
package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// Target is a cluster a drill runs against.
type Target struct {
	// Protected says whether Rampart guards this cluster: the drill then
	// applies Rampart's protection (labels, policies) to what it sets up.
	Protected bool
	Config    *rest.Config
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	Ext       apiextensionsclient.Interface
	// Prefix makes the drill's object names unique in a shared cluster.
	Prefix string
	// Scale divides the drill's size, for quick runs (1 = as in the report).
	Scale int
	// Local is the local cluster behind the target when the drill started
	// it (nil with --kubeconfig). The gateway drills need it: they reach
	// the gateway, restart it and read the API server's memory.
	Local *localcluster.Cluster
}

// NewTarget builds the clients of a target.
func NewTarget(cfg *rest.Config, protected bool, prefix string, scale int) (Target, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.WarningHandler = rest.NoWarnings{} // the drill reports what matters itself
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Target{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Target{}, err
	}
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return Target{}, err
	}
	return Target{Protected: protected, Config: cfg, Client: cs, Dynamic: dyn, Ext: ext, Prefix: prefix, Scale: max(scale, 1)}, nil
}

// Loss is what an incident destroyed.
type Loss struct {
	// Lost of Total units were destroyed.
	Lost  int    `json:"lost"`
	Total int    `json:"total"`
	Unit  string `json:"unit"`
	// Denied is the error the mistaken request got, if Rampart denied it.
	Denied string `json:"denied,omitempty"`
	// Bound is the loss protection allows: 0, or a flow control's limit.
	Bound int `json:"bound,omitempty"`
	// Measured are figures beyond the loss, by name with the unit as
	// suffix (business_p99_ms, apiserver_peak_rss_mib).
	Measured map[string]float64 `json:"measured,omitempty"`
}

func (l Loss) String() string { return fmt.Sprintf("%d/%d %s", l.Lost, l.Total, l.Unit) }

// Drill is one incident.
type Drill struct {
	Name string
	// Incident says what happened, and where it is reported.
	Incident string
	Run      func(ctx context.Context, t Target) (Loss, error)
}

// All are the drills, in the order they run.
func All() []Drill {
	all := []Drill{crdDeletion, namespaceDeletion, scaleToZeroTypo, chartUninstall, peakHourRollout, runawayController, nodeOfflining}
	all = append(all, nodeOffliningWays...)
	return append(all, concurrentDisruptions, statefulMaintenance, listStorm, listStormAPF, listStormRouted, gatewayRestart, podCreationSurge, namespaceRestore, etcdDirectDelete, kubeletBadRestart, orphanedPods, etcdNoSpace)
}

// Select returns the named incident drills and everyday operations, or all
// of both for no names.
func Select(names []string) ([]Drill, []Operation, error) {
	if len(names) == 0 {
		return All(), Everyday(), nil
	}
	var out []Drill
	for _, n := range names {
		i := slices.IndexFunc(All(), func(d Drill) bool { return d.Name == n })
		if i >= 0 {
			out = append(out, All()[i])
			continue
		}
		if !slices.ContainsFunc(Everyday(), func(o Operation) bool { return o.Name == n }) {
			var known []string
			for _, d := range All() {
				known = append(known, d.Name)
			}
			for _, o := range Everyday() {
				known = append(known, o.Name)
			}
			return nil, nil, fmt.Errorf("no drill %q; drills: %s", n, strings.Join(known, ", "))
		}
	}
	return out, selectOperations(names), nil
}

// Result is one drill's outcome on both targets.
type Result struct {
	Drill       string        `json:"drill"`
	Incident    string        `json:"incident"`
	Unprotected Loss          `json:"unprotected"`
	Protected   Loss          `json:"protected"`
	Duration    time.Duration `json:"durationNanos"`
}

// OverBounds are the protected side's figures past a bound the drill
// measured beside them: a figure NAME_percent over its NAME_bound_pct
// (list-storm-routed's memory rise of the API servers the storm was
// routed away from), named with both values.
func (r Result) OverBounds() []string {
	var over []string
	for key, bound := range r.Protected.Measured {
		name, ok := strings.CutSuffix(key, "_bound_pct")
		if !ok {
			continue
		}
		if v, measured := r.Protected.Measured[name+"_percent"]; measured && v > bound {
			over = append(over, fmt.Sprintf("%s %s %.1f%% over its bound %.0f%%", r.Drill, name, v, bound))
		}
	}
	slices.Sort(over)
	return over
}

// Run runs each drill on the unprotected and the protected target.
func Run(ctx context.Context, drills []Drill, unprotected, protected Target, progress io.Writer) ([]Result, error) {
	var results []Result
	for _, d := range drills {
		start := time.Now()
		r := Result{Drill: d.Name, Incident: d.Incident}
		for _, side := range []struct {
			t    Target
			loss *Loss
			name string
		}{{unprotected, &r.Unprotected, "unprotected"}, {protected, &r.Protected, "protected"}} {
			fmt.Fprintf(progress, "drill %s (%s)...\n", d.Name, side.name)
			loss, err := d.Run(ctx, side.t)
			if err != nil {
				return results, fmt.Errorf("drill %s (%s): %w", d.Name, side.name, err)
			}
			*side.loss = loss
		}
		r.Duration = time.Since(start)
		results = append(results, r)
	}
	return results, nil
}

// WriteTable prints the results as a table.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DRILL\tUNPROTECTED LOSS\tPROTECTED LOSS")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Drill, r.Unprotected, r.Protected)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeFigures(w, results)
}

// writeFigures prints, under the table, the figures drills measured
// beyond their loss, unprotected and protected side by side.
func writeFigures(w io.Writer, results []Result) error {
	var rows []figureRow
	for _, r := range results {
		rows = append(rows, figureRow{r.Drill, r.Unprotected.Measured, r.Protected.Measured})
	}
	return writeFigureRows(w, "DRILL", rows)
}

// figureRow is one drill's or operation's figures on both sides.
type figureRow struct {
	name                   string
	unprotected, protected map[string]float64
}

// writeFigureRows prints the figures of rows, unprotected and protected
// side by side, under a header naming the first column; nothing when no
// row has any.
func writeFigureRows(w io.Writer, first string, rows []figureRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, r := range rows {
		if len(r.unprotected)+len(r.protected) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(tw, "\n%s\tFIGURE\tUNPROTECTED\tPROTECTED\n", first)
			header = true
		}
		keys := slices.Sorted(maps.Keys(r.unprotected))
		for k := range maps.Keys(r.protected) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.name, k, figure(r.unprotected, k), figure(r.protected, k))
		}
	}
	return tw.Flush()
}

func figure(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// WriteJSON writes the results as the JSON report: the incident drills,
// and the everyday operations when any ran.
func WriteJSON(w io.Writer, results []Result, ops []OperationResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	report := map[string]any{"drills": results}
	if len(ops) > 0 {
		report["operations"] = ops
	}
	return enc.Encode(report)
}
