package admission

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// denials counts denied requests. Its labels are bounded: rule is one of
// the decision packages' rule names, resource one of the resources the
// webhook configurations name.
var denials = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_admission_denials_total",
	Help: "Admission reviews denied by Rampart's webhooks, by rule and resource. The API server may ask more than once for one request (it re-validates on a conflict retry).",
}, []string{"rule", "resource"})

// warnings counts requests a Warn-mode policy admitted with a warning.
var warnings = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "rampart_admission_warnings_total",
	Help: "Admission reviews a Warn-mode policy would have denied and admitted with a warning, by rule and resource.",
}, []string{"rule", "resource"})

func init() {
	metrics.Registry.MustRegister(denials, warnings)
}
