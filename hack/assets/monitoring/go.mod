// Pins the Prometheus operator, whose CRDs (ServiceMonitor, PrometheusRule)
// the chart tests install so that the API server validates the chart's
// monitoring objects (hack/assets.sh copies them into bin/k8s/crds).
module github.com/rampart-io/rampart/hack/assets/monitoring

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
