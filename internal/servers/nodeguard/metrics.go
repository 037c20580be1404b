package nodeguard

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Metrics are the guard's Prometheus series, in a registry of its own.
type Metrics struct {
	Registry *prometheus.Registry
	vetoes   *prometheus.CounterVec
	passes   *prometheus.CounterVec
	calls    *prometheus.HistogramVec
	// conditionWrites are the guard's patches of a pod's
	// rampart.io/ContainersRunning condition, by status.
	conditionWrites *prometheus.CounterVec

	// The histogram's children by label: WithLabelValues hashes and may
	// allocate on every call, a sync.Map lookup does not.
	callsOf sync.Map // [2]string -> prometheus.Observer
}

// NewMetrics registers the guard's series and the Go and process
// collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		vetoes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_nodeguard_vetoes_total",
			Help: "Pod-ending CRI calls the node guard refused, by call and reason.",
		}, []string{"call", "reason"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_nodeguard_passes_total",
			Help: "Pod-ending CRI calls the node guard judged and let through, by call and reason.",
		}, []string{"call", "reason"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rampart_nodeguard_cri_call_duration_seconds",
			Help: "CRI calls through the node guard, from the kubelet's request to the runtime's answer (the whole stream for streaming calls), by method and gRPC code.",
			// CRI calls take from tens of microseconds (Version) to
			// seconds (a stop with a grace period, an image pull).
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5, 30, 120},
		}, []string{"method", "code"}),
	}
	m.conditionWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_nodeguard_condition_writes_total",
		Help: "Status patches of a protected pod's rampart.io/ContainersRunning condition by the node guard, by the status written (True: a regular container runs; False: none runs, the node may report the pod ended).",
	}, []string{"status"})
	m.Registry.MustRegister(m.vetoes, m.passes, m.calls, m.conditionWrites,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records one call. The method label is the CRI method's name for
// the runtime.v1 services and "other" for the rest, so that a client
// inventing method names cannot invent series.
func (m *Metrics) observe(method string, d time.Duration, err error) {
	key := [2]string{methodLabel(method), status.Code(err).String()}
	o, ok := m.callsOf.Load(key)
	if !ok {
		o, _ = m.callsOf.LoadOrStore(key, m.calls.WithLabelValues(key[0], key[1]))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

func methodLabel(method string) string {
	for _, svc := range []string{"/runtime.v1.RuntimeService/", "/runtime.v1.ImageService/"} {
		if name, ok := strings.CutPrefix(method, svc); ok && criMethods[name] {
			return name
		}
	}
	return "other"
}

// criMethods are the runtime.v1 methods of this build's cri-api.
var criMethods = func() map[string]bool {
	m := map[string]bool{}
	for _, sd := range []*grpc.ServiceDesc{&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc} {
		for _, md := range sd.Methods {
			m[md.MethodName] = true
		}
		for _, s := range sd.Streams {
			m[s.StreamName] = true
		}
	}
	return m
}()
