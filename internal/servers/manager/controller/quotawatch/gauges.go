package quotawatch

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/internal/operations/quota"
)

// Gauges export, on each scrape, every ResourceQuota's used/hard ratio and
// headroom per resource from the manager's cache: the same on every
// replica, since both come from the quotas' status.
type Gauges struct {
	reader          client.Reader
	ratio, headroom *prometheus.Desc
}

// NewGauges reads quotas from reader.
func NewGauges(reader client.Reader) *Gauges {
	return &Gauges{
		reader: reader,
		ratio: prometheus.NewDesc("rampart_quota_used_ratio",
			"Used over hard of a ResourceQuota's resource (1 = at the limit).", []string{"namespace", "resourcequota", "resource"}, nil),
		headroom: prometheus.NewDesc("rampart_quota_headroom",
			"Hard minus used of a ResourceQuota's resource, in its base unit (objects, cores, bytes).", []string{"namespace", "resourcequota", "resource"}, nil),
	}
}

func (g *Gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.ratio
	ch <- g.headroom
}

func (g *Gauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var list corev1.ResourceQuotaList
	if err := g.reader.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		for _, r := range quota.Ratios(&list.Items[i]) {
			ch <- prometheus.MustNewConstMetric(g.ratio, prometheus.GaugeValue, r.Value, r.Namespace, r.Quota, string(r.Resource))
			ch <- prometheus.MustNewConstMetric(g.headroom, prometheus.GaugeValue, r.Headroom(), r.Namespace, r.Quota, string(r.Resource))
		}
	}
}
