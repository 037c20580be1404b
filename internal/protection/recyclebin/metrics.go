package recyclebin

import "github.com/prometheus/client_golang/prometheus"

// The recycle bin's metrics; the manager registers them (Collectors).
var (
	captures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_recyclebin_captures_total",
		Help: "Copies the recycle bin stored before admitting a delete, by resource.",
	}, []string{"resource"})
	// captureSeconds is what a kept delete waits for its copy, the
	// recycle bin's share of the delete's latency.
	captureSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rampart_recyclebin_capture_duration_seconds",
		Help:    "Time the deletion webhook waited for a copy to be stored before admitting a delete, failed captures included.",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.25, 0.5, 1, 2, 4},
	})
	captureFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_recyclebin_capture_failures_total",
		Help: "Deletes of kept objects refused because their copy could not be stored, by resource.",
	}, []string{"resource"})
	evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_recyclebin_evictions_total",
		Help: "Copies the recycle bin removed, by reason: retention (older than their policy keeps) or size (over their policy's maxSize).",
	}, []string{"reason"})
	storedEntries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rampart_recyclebin_entries",
		Help: "Copies the recycle bin holds, as of the leader's last pass.",
	})
	storedBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rampart_recyclebin_bytes",
		Help: "Bytes the recycle bin's copies take in its store, as of the leader's last pass.",
	})
	contentsNotKept = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_recyclebin_namespace_contents_not_kept_total",
		Help: "Objects of a protected namespace being deleted that went without a copy, by reason: cap (the namespace's contents reached --recycle-bin-namespace-max-size) or store (the store failed or was slow).",
	}, []string{"reason"})
	settled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_recyclebin_settled_total",
		Help: "Captures settled, by what became of the object: Deleted, or NotDeleted (the delete was refused or failed after the capture).",
	}, []string{"state"})
)

// Collectors are the metrics to register.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{captures, captureSeconds, captureFailures, settled, evictions, storedEntries, storedBytes, deletedOutside, watched, contentsNotKept}
}
