package admit

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/flowcontrol"
)

// breakerGauge exports, on each scrape, every DeletionFlowControl's breaker
// state and counts from the manager's cache: the same on every replica,
// since the state lives in the objects' status.
type breakerGauge struct {
	reader client.Reader
	open   *prometheus.Desc
	count  *prometheus.Desc
}

func newBreakerGauge(reader client.Reader) *breakerGauge {
	return &breakerGauge{
		reader: reader,
		open: prometheus.NewDesc("rampart_flowcontrol_breaker_open",
			"1 while a DeletionFlowControl's breaker is open.", []string{"name"}, nil),
		count: prometheus.NewDesc("rampart_flowcontrol_window_deletes",
			"Deletes counted in a limit's current window.", []string{"name", "limit"}, nil),
	}
}

func (g *breakerGauge) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.open
	ch <- g.count
}

func (g *breakerGauge) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var list v1alpha1.DeletionFlowControlList
	if err := g.reader.List(ctx, &list); err != nil {
		return
	}
	now := time.Now()
	for _, f := range list.Items {
		open := 0.0
		if f.Status.Breaker.State == flowcontrol.Open {
			open = 1
		}
		ch <- prometheus.MustNewConstMetric(g.open, prometheus.GaugeValue, open, f.Name)
		limits, err := flowcontrol.Limits(f.Spec)
		if err != nil {
			continue
		}
		st := f.Status.DeepCopy()
		for i, c := range flowcontrol.Counts(limits, st, now) {
			ch <- prometheus.MustNewConstMetric(g.count, prometheus.GaugeValue, float64(c), f.Name, limits[i].String())
		}
	}
}

// Collectors export every flow control's breaker state and window counts,
// read from reader (the manager's cache) on each scrape.
func (*Plugin) Collectors(reader client.Reader) []prometheus.Collector {
	return []prometheus.Collector{newBreakerGauge(reader)}
}
