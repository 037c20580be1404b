package space

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the space guard's gauges, set from each look at etcd.
type Metrics struct {
	dbSize, quota, share *prometheus.GaugeVec
	warning, noSpace     prometheus.Gauge
	written              *prometheus.GaugeVec
}

// NewMetrics makes the gauges; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		dbSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rampart_etcd_db_size_bytes",
			Help: "Each etcd member's database file size: what etcd compares with its --quota-backend-bytes."}, []string{"member"}),
		quota: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rampart_etcd_quota_backend_bytes",
			Help: "Each etcd member's --quota-backend-bytes (as it reports it; etcd < 3.6: the manager's --etcd-space-quota-bytes)."}, []string{"member"}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rampart_etcd_space_used_ratio",
			Help: "Each etcd member's database size over its quota; at 1 etcd raises NOSPACE and refuses every write."}, []string{"member"}),
		warning: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rampart_etcd_space_warning",
			Help: "1 when the fullest etcd member is at or past --etcd-space-warn-share of its quota, or NOSPACE is raised (RampartEtcdSpaceLow)."}),
		noSpace: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rampart_etcd_nospace_alarm",
			Help: "1 while etcd's NOSPACE alarm is raised: every write is refused until rampart etcd space recover (RampartEtcdNoSpace)."}),
		written: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rampart_etcd_space_written_bytes",
			Help: "The key prefixes written most since the previous look (keys created or rewritten, their bytes now; each rewrite kept an older revision until compaction): the top few only."}, []string{"prefix"}),
	}
}

// Collectors are the gauges, to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.dbSize, m.quota, m.share, m.warning, m.noSpace, m.written}
}

// Observe sets the gauges from one look: the members' sizes, the verdict,
// and the prefixes written most (replacing the previous ones).
func (m *Metrics) Observe(s Space, v Verdict, top []Grown) {
	m.dbSize.Reset()
	m.quota.Reset()
	m.share.Reset()
	for _, mem := range s.Members {
		if mem.Error != "" {
			continue
		}
		m.dbSize.WithLabelValues(mem.Name).Set(float64(mem.DBSize))
		m.quota.WithLabelValues(mem.Name).Set(float64(mem.Quota))
		m.share.WithLabelValues(mem.Name).Set(float64(mem.DBSize) / float64(max(mem.Quota, 1)))
	}
	m.warning.Set(b2f(v.Level != OK))
	m.noSpace.Set(b2f(v.Level == NoSpace))
	m.written.Reset()
	for _, g := range top {
		m.written.WithLabelValues(g.Prefix).Set(float64(g.Bytes))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
