package gateway

import (
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// maxResourceLabels bounds the resource label: a client inventing paths
// must not invent time series.
const maxResourceLabels = 500

type metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	inFlight   *prometheus.GaugeVec
	rejections *prometheus.CounterVec
	ejections  *prometheus.CounterVec
	routed     *prometheus.CounterVec
	leftOut    *prometheus.GaugeVec
	top        *topClients
	// What the answers held, by policy and resource (observe.go).
	responseBytes *prometheus.CounterVec
	listObjects   *prometheus.HistogramVec
	watchEvents   *prometheus.CounterVec

	// The children of the vectors above by their labels: a lookup in a
	// sync.Map hashes no label string and allocates nothing, where
	// WithLabelValues would on every request.
	requestsOf   children[requestLabels, prometheus.Counter]
	latencies    children[[2]string, prometheus.Observer]
	inFlights    children[[2]string, prometheus.Gauge]
	rejectionsOf children[[2]string, prometheus.Counter]
	// By policy, pool and outcome.
	routedOf children[[3]string, prometheus.Counter]
	// By policy and resource.
	responseBytesOf children[[2]string, prometheus.Counter]
	listObjectsOf   children[[2]string, prometheus.Observer]
	watchEventsOf   children[[2]string, prometheus.Counter]

	mu        sync.Mutex
	resources map[string]bool
	// labelOf caches the resource label of each resource admitted to
	// resources, so that a known one is found without the lock.
	labelOf sync.Map // resourceKey -> string
}

type requestLabels struct {
	policy, verb, resource string
	code                   int
}

type resourceKey struct{ group, resource, subresource string }

// children caches the children of a metric vector by their labels. The
// vectors' label values are bounded already (policies, verbs, at most
// maxResourceLabels resources, codes), and so are the entries.
type children[K comparable, M any] struct {
	m     sync.Map
	child func(K) M
}

func (c *children[K, M]) get(k K) M {
	if m, ok := c.m.Load(k); ok {
		return m.(M)
	}
	m, _ := c.m.LoadOrStore(k, c.child(k))
	return m.(M)
}

// request is the requests_total counter of a request.
func (m *metrics) request(policy, verb, resource string, code int) prometheus.Counter {
	return m.requestsOf.get(requestLabels{policy, verb, resource, code})
}

func (m *metrics) latencyOf(policy, verb string) prometheus.Observer {
	return m.latencies.get([2]string{policy, verb})
}

func (m *metrics) inFlightOf(policy, kind string) prometheus.Gauge {
	return m.inFlights.get([2]string{policy, kind})
}

func (m *metrics) rejection(policy, reason string) prometheus.Counter {
	return m.rejectionsOf.get([2]string{policy, reason})
}

var knownVerbs = map[string]bool{
	"get": true, "list": true, "watch": true, "create": true, "update": true, "patch": true,
	"delete": true, "deletecollection": true, "head": true, "options": true, "post": true, "put": true,
}

func newMetrics(g *Gateway) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_requests_total",
			Help: "Requests through the gateway by TrafficPolicy (none: no policy matched), verb, resource and HTTP code.",
		}, []string{"policy", "verb", "resource", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rampart_gateway_request_duration_seconds",
			Help:    "Time from the gateway receiving a request to the end of its response, by policy and verb; watches and other long-running requests are left out.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"policy", "verb"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rampart_gateway_requests_in_flight",
			Help: "Requests being proxied, by policy and kind (short, or long: watches and streams).",
		}, []string{"policy", "kind"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_rejections_total",
			Help: "Requests the gateway refused itself, by policy and reason (rate, in-flight, rejected, impersonation, masters, unauthenticated, breaker, list-cost, unpaginated-list, watch-max, watch-rate, watch-storm, pool-unavailable, etcd-space).",
		}, []string{"policy", "reason"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_upstream_ejections_total",
			Help: "Times an API server was taken out of rotation after consecutive failed requests, by pool and API server.",
		}, []string{"pool", "upstream"}),
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_routed_requests_total",
			Help: "Requests of Route TrafficPolicies by policy, pool and outcome: routed (to the policy's pool), fallback (to the default pool: none of the policy's pool's API servers was available) or refused (503: none was, and the policy says onUnavailable: Reject).",
		}, []string{"policy", "pool", "outcome"}),
		leftOut: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rampart_gateway_policies_left_out",
			Help: "TrafficPolicies this gateway does not apply, by policy and reason (unknown-pool: a Route policy names a pool the gateway has no --upstream-pool for); their requests are judged by the next policy that matches.",
		}, []string{"policy", "reason"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_response_bytes_total",
			Help: "Bytes of the answers sent to clients (as sent: compressed when the API server compressed them), by policy and resource; refusals included, upgraded connections (exec, port-forward) not.",
		}, []string{"policy", "resource"}),
		listObjects: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rampart_gateway_list_objects",
			Help:    "Objects each LIST returned (items of its page, counted as the answer streamed through; JSON and protobuf answers), by policy and resource; _sum is all objects listed.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"policy", "resource"}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_watch_events_total",
			Help: "Events sent on watches that have ended, by policy and resource.",
		}, []string{"policy", "resource"}),
		top:       newTopClients(10, 256, time.Minute),
		resources: map[string]bool{},
	}
	m.requestsOf.child = func(l requestLabels) prometheus.Counter {
		return m.requests.WithLabelValues(l.policy, l.verb, l.resource, strconv.Itoa(l.code))
	}
	m.latencies.child = func(l [2]string) prometheus.Observer { return m.latency.WithLabelValues(l[0], l[1]) }
	m.inFlights.child = func(l [2]string) prometheus.Gauge { return m.inFlight.WithLabelValues(l[0], l[1]) }
	m.rejectionsOf.child = func(l [2]string) prometheus.Counter { return m.rejections.WithLabelValues(l[0], l[1]) }
	m.routedOf.child = func(l [3]string) prometheus.Counter { return m.routed.WithLabelValues(l[0], l[1], l[2]) }
	m.responseBytesOf.child = func(l [2]string) prometheus.Counter { return m.responseBytes.WithLabelValues(l[0], l[1]) }
	m.listObjectsOf.child = func(l [2]string) prometheus.Observer { return m.listObjects.WithLabelValues(l[0], l[1]) }
	m.watchEventsOf.child = func(l [2]string) prometheus.Counter { return m.watchEvents.WithLabelValues(l[0], l[1]) }
	m.registry.MustRegister(m.requests, m.latency, m.inFlight, m.rejections, m.ejections, m.routed, m.leftOut, m.responseBytes, m.listObjects, m.watchEvents,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&upstreamCollector{g: g}, m.top, brakeCollector{g}, g.space.refusals)
	return m
}

// labels are the verb and resource labels of a request: the resource only
// once an API server has answered for it with something other than 404,
// and only up to maxResourceLabels of them.
func (m *metrics) labels(r traffic.Request, code int) (verb, resource string) {
	verb = r.Verb
	if !knownVerbs[verb] {
		verb = "other"
	}
	if !r.IsResource {
		return verb, "nonresource"
	}
	key := resourceKey{r.APIGroup, r.Resource, r.Subresource}
	if l, ok := m.labelOf.Load(key); ok {
		return verb, l.(string)
	}
	resource = r.Resource
	if r.APIGroup != "" {
		resource += "." + r.APIGroup
	}
	if r.Subresource != "" {
		resource += "/" + r.Subresource
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.resources[resource] {
		return verb, resource
	}
	if code == http.StatusNotFound || len(m.resources) >= maxResourceLabels {
		return verb, "other"
	}
	m.resources[resource] = true
	m.labelOf.Store(key, resource)
	return verb, resource
}

var (
	upLabels   = []string{"pool", "upstream"}
	upInFlight = prometheus.NewDesc("rampart_gateway_upstream_in_flight", "Short requests running on each API server, by pool.", upLabels, nil)
	upStreams  = prometheus.NewDesc("rampart_gateway_upstream_streams", "Watches and other long-running requests open on each API server, by pool.", upLabels, nil)
	upRequests = prometheus.NewDesc("rampart_gateway_upstream_requests_total", "Requests sent to each API server, by pool, retries on another included.", upLabels, nil)
	upWeight   = prometheus.NewDesc("rampart_gateway_upstream_weight", "Each API server's share of its pool's new requests: 0 out of rotation, rising from 0.1 to 1 during slow start.", upLabels, nil)
)

// upstreamCollector reports the pool as it is at scrape time.
type upstreamCollector struct{ g *Gateway }

func (c *upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upInFlight
	ch <- upStreams
	ch <- upRequests
	ch <- upWeight
}

func (c *upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, p := range c.g.pools {
		for _, s := range p.Servers {
			ch <- prometheus.MustNewConstMetric(upInFlight, prometheus.GaugeValue, float64(s.InFlight.Load()), p.Name, s.URL.Host)
			ch <- prometheus.MustNewConstMetric(upStreams, prometheus.GaugeValue, float64(s.Streams.Load()), p.Name, s.URL.Host)
			ch <- prometheus.MustNewConstMetric(upRequests, prometheus.CounterValue, float64(s.Requests.Load()), p.Name, s.URL.Host)
			ch <- prometheus.MustNewConstMetric(upWeight, prometheus.GaugeValue, p.Weight(s, now), p.Name, s.URL.Host)
		}
	}
}

var topDesc = prometheus.NewDesc("rampart_gateway_top_client_requests",
	"Decayed request counts of the busiest clients (users), at most a handful at a time so that the number of series stays bounded.",
	[]string{"client"}, nil)

// topClients finds the busiest clients in bounded memory with the
// Space-Saving algorithm: it keeps at most capacity counters; a new client
// when full takes over the smallest counter (and its count, which makes
// counts upper bounds). Every halfLife the counts halve, so the ranking
// follows current load rather than all history.
type topClients struct {
	mu       sync.Mutex
	show     int
	capacity int
	halfLife time.Duration
	counts   map[string]float64
	decayed  time.Time
	now      func() time.Time
}

func newTopClients(show, capacity int, halfLife time.Duration) *topClients {
	return &topClients{show: show, capacity: capacity, halfLife: halfLife, counts: map[string]float64{}, now: time.Now, decayed: time.Now()}
}

// Add counts one request of client.
func (t *topClients) Add(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay()
	if _, ok := t.counts[client]; !ok && len(t.counts) >= t.capacity {
		minKey, minCount := "", 0.0
		for k, c := range t.counts {
			if minKey == "" || c < minCount {
				minKey, minCount = k, c
			}
		}
		delete(t.counts, minKey)
		t.counts[client] = minCount
	}
	t.counts[client]++
}

func (t *topClients) decay() {
	now := t.now()
	for now.Sub(t.decayed) >= t.halfLife {
		t.decayed = t.decayed.Add(t.halfLife)
		for k, c := range t.counts {
			if c /= 2; c < 0.5 {
				delete(t.counts, k)
			} else {
				t.counts[k] = c
			}
		}
	}
}

// Top returns the busiest clients, most requests first.
func (t *topClients) Top() []clientCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decay()
	out := make([]clientCount, 0, len(t.counts))
	for k, c := range t.counts {
		out = append(out, clientCount{k, c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].client < out[j].client
	})
	return out[:min(len(out), t.show)]
}

type clientCount struct {
	client string
	count  float64
}

func (t *topClients) Describe(ch chan<- *prometheus.Desc) { ch <- topDesc }

func (t *topClients) Collect(ch chan<- prometheus.Metric) {
	for _, c := range t.Top() {
		ch <- prometheus.MustNewConstMetric(topDesc, prometheus.GaugeValue, c.count, c.client)
	}
}
