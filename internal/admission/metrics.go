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
	Help: "Requests denied by Rampart's admission webhooks, by rule and resource.",
}, []string{"rule", "resource"})

func init() {
	metrics.Registry.MustRegister(denials)
}
