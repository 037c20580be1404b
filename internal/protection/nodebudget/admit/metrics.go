package admit

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/nodebudget"
)

// waterLevel exports, on each scrape, every NodeDisruptionBudget's
// selected, available and floor node counts, from the manager's cache
// (the budgets) and the cluster view (the nodes): the same on every
// replica. Available below the floor is nodes lost to something no
// budget refuses (a machine failing): the alert pages on it.
type waterLevel struct {
	reader client.Reader
	// plugin's Nodes are read at each scrape: the manager registers the
	// collectors before it initializes the protections.
	plugin                       *Plugin
	expected, available, desired *prometheus.Desc
}

func (g *waterLevel) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.expected
	ch <- g.available
	ch <- g.desired
}

func (g *waterLevel) Collect(ch chan<- prometheus.Metric) {
	nodes := g.plugin.Nodes
	if nodes == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var list v1alpha1.NodeDisruptionBudgetList
	if err := g.reader.List(ctx, &list); err != nil {
		return
	}
	for _, nb := range list.Items {
		sel, err := selector(&nb)
		if err != nil {
			continue
		}
		var expected, available int
		present := map[string]bool{}
		for _, n := range nodes.Nodes(sel) {
			expected++
			present[n.Name] = true
			if nodebudget.Available(n) {
				available++
			}
		}
		// Nodes deleted in service lately are still the pool's, out of
		// service, as the decisions count them.
		expected += nodebudget.Deleted(nb.Status.Disruptions, func(n string) bool { return present[n] }, time.Now())
		ch <- prometheus.MustNewConstMetric(g.expected, prometheus.GaugeValue, float64(expected), nb.Name)
		ch <- prometheus.MustNewConstMetric(g.available, prometheus.GaugeValue, float64(available), nb.Name)
		if floor, err := nodebudget.Floor(nb.Spec, expected); err == nil && nb.Spec.MinAvailable != nil {
			ch <- prometheus.MustNewConstMetric(g.desired, prometheus.GaugeValue, float64(floor), nb.Name)
		}
	}
}

// Collectors export every node budget's water level, read on each scrape.
func (p *Plugin) Collectors(reader client.Reader) []prometheus.Collector {
	return []prometheus.Collector{&waterLevel{reader: reader, plugin: p,
		expected: prometheus.NewDesc("rampart_nodebudget_expected_nodes",
			"Nodes a NodeDisruptionBudget selects, with those deleted in service in the last hour.", []string{"name"}, nil),
		available: prometheus.NewDesc("rampart_nodebudget_available_nodes",
			"Nodes a NodeDisruptionBudget selects that are Ready and schedulable.", []string{"name"}, nil),
		desired: prometheus.NewDesc("rampart_nodebudget_desired_available_nodes",
			"The floor of a NodeDisruptionBudget: nodes it keeps Ready and schedulable.", []string{"name"}, nil),
	}}
}
