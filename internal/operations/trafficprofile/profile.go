package trafficprofile

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/beorn7/perks/quantile"
)

// SketchName says how latency quantiles are estimated: a streaming
// sketch, so that a client's millions of requests cost it a few KiB.
const SketchName = "CKMS targeted quantiles (github.com/beorn7/perks/quantile, as Prometheus summaries): p50 within ±0.05, p99 within ±0.001 in rank"

var sketchTargets = map[float64]float64{0.5: 0.05, 0.99: 0.001}

const (
	// maxPoints bounds each client's rate series: when a log spans more,
	// the series' buckets double in length.
	maxPoints = 512
	// peakWindow is how far back, in seconds, a request may arrive late
	// (an audit log is in order of answers, not of receipt) and still
	// count in its second's peak. Later ones (long watches, ending
	// minutes after they began) count in totals and series only.
	peakWindow = 64
	// maxClients bounds the clients profiled one by one; beyond it, the
	// rest are one client named OtherClients, so that a log of invented
	// user agents cannot grow memory without end.
	maxClients = 100000
	// OtherClients is the client standing for those beyond maxClients.
	OtherClients = "(other clients)"
)

// Profiler aggregates entries into per-client and per-resource profiles.
type Profiler struct {
	clients   map[clientKey]*client
	resources map[string]*ResourceCost
	origin    time.Time
	bucket    int64 // seconds per series point
	from, to  time.Time
	requests  int64
	flights   flights
}

// clientKey is a client: the user the API server authorised, its user
// agent, and the proxy that impersonated it (none: "").
type clientKey struct{ user, agent, proxy string }

type client struct {
	p        ClientProfile
	latency  *quantile.Stream
	ring     [peakWindow]second
	latest   int64
	series   []int64
	inFlight inFlight
}

// second counts one second of a client's requests, for its peaks.
type second struct {
	at                   int64
	requests, lists, obj int64
}

// NewProfiler returns an empty profiler.
func NewProfiler() *Profiler {
	return &Profiler{clients: map[clientKey]*client{}, resources: map[string]*ResourceCost{}, bucket: 1}
}

// Add counts one request.
func (p *Profiler) Add(e *Entry) {
	if e.Time.IsZero() {
		return
	}
	p.requests += e.Weight
	if p.origin.IsZero() {
		p.origin = e.Time.Truncate(time.Second)
	}
	if p.from.IsZero() || e.Time.Before(p.from) {
		p.from = e.Time
	}
	if e.Time.After(p.to) {
		p.to = e.Time
	}
	c := p.client(e)
	c.add(e, p)
	p.flights.add(c, e)
	res := p.resources[resourceName(e)]
	if res == nil {
		res = &ResourceCost{Resource: resourceName(e)}
		p.resources[res.Resource] = res
	}
	res.Requests += e.Weight
	if !e.LongRunning() {
		res.ServerSeconds += e.Latency.Seconds() * float64(e.Weight)
	}
	if e.Verb == "list" {
		res.Lists += e.Weight
		if e.Objects >= 0 {
			res.ListObjects += e.Objects * e.Weight
		} else {
			res.ListsUncounted += e.Weight
		}
		if e.Bytes >= 0 {
			res.ListBytes += e.Bytes * e.Weight
		}
	}
}

func (p *Profiler) client(e *Entry) *client {
	k := clientKey{e.User, e.UserAgent, e.Proxy}
	if c, ok := p.clients[k]; ok {
		return c
	}
	if len(p.clients) >= maxClients {
		k = clientKey{OtherClients, "", ""}
		if c, ok := p.clients[k]; ok {
			return c
		}
	}
	kind, component := Classify(e.User, e.Groups)
	c := &client{
		p: ClientProfile{
			User: k.user, UserAgent: k.agent, Groups: e.Groups, Proxy: k.proxy, Kind: kind, Component: component,
			ByVerb: map[string]int64{}, ByResource: map[string]int64{},
		},
		latency: quantile.NewTargeted(sketchTargets),
		latest:  math.MinInt64,
	}
	p.clients[k] = c
	return c
}

func (c *client) add(e *Entry, p *Profiler) {
	w := e.Weight
	cp := &c.p
	cp.Requests += w
	cp.ByVerb[e.Verb] += w
	cp.ByResource[resourceName(e)] += w
	switch {
	case e.Refused:
		cp.RefusedByGateway += w
	case e.Code == 429:
		cp.Throttled += w
	case e.Code >= 500:
		cp.Errors += w
	case e.Code >= 400:
		cp.ClientErrors += w
	}
	objects := int64(0)
	switch e.Verb {
	case "list":
		cp.Lists += w
		if e.Objects >= 0 {
			objects = e.Objects * w
			cp.ListObjects += objects
		} else {
			cp.ListsUncounted += w
		}
		if e.Bytes >= 0 {
			cp.ListBytes += e.Bytes * w
		}
	case "watch":
		cp.Watches += w
		cp.WatchEvents += e.WatchEvents * w
	}
	if e.Bytes >= 0 {
		cp.ResponseBytes += e.Bytes * w
	}
	if !e.LongRunning() && e.Latency > 0 {
		s := e.Latency.Seconds()
		cp.ServerSeconds += s * float64(w)
		c.latency.Insert(s)
	}
	// Peaks, per second of receipt.
	sec := e.Time.Unix()
	if sec > c.latest {
		for s := max(c.latest+1, sec-peakWindow+1); s <= sec; s++ {
			c.settle(&c.ring[mod(s)])
			c.ring[mod(s)] = second{at: s}
		}
		c.latest = sec
	}
	if slot := &c.ring[mod(sec)]; slot.at == sec {
		slot.requests += w
		if e.Verb == "list" {
			slot.lists += w
			slot.obj += objects
		}
	}
	// Series, in buckets from the profile's origin.
	i := e.Time.Sub(p.origin).Milliseconds() / 1000 / p.bucket
	if i < 0 {
		i = 0
	}
	for i >= maxPoints {
		p.coarsen()
		i = e.Time.Sub(p.origin).Milliseconds() / 1000 / p.bucket
	}
	if int(i) >= len(c.series) {
		c.series = append(c.series, make([]int64, int(i)+1-len(c.series))...)
	}
	c.series[i] += w
}

func mod(s int64) int64 { return ((s % peakWindow) + peakWindow) % peakWindow }

// settle takes a finished second into the client's peaks.
func (c *client) settle(s *second) {
	if s.requests > c.p.PeakPerSecond {
		c.p.PeakPerSecond, c.p.PeakAt = s.requests, time.Unix(s.at, 0).UTC()
	}
	c.p.PeakListsPerSecond = max(c.p.PeakListsPerSecond, s.lists)
	c.p.PeakListObjectsPerSecond = max(c.p.PeakListObjectsPerSecond, s.obj)
}

// coarsen doubles the length of every series' buckets.
func (p *Profiler) coarsen() {
	p.bucket *= 2
	for _, c := range p.clients {
		for i := range c.series {
			if i%2 == 0 {
				c.series[i/2] = c.series[i]
			} else {
				c.series[i/2] += c.series[i]
			}
		}
		c.series = c.series[:(len(c.series)+1)/2]
	}
}

func resourceName(e *Entry) string {
	switch {
	case e.Resource == "":
		return "nonresource " + e.Path
	case e.APIGroup == "" && e.Subresource == "":
		return e.Resource
	case e.APIGroup == "":
		return e.Resource + "/" + e.Subresource
	case e.Subresource == "":
		return e.Resource + "." + e.APIGroup
	}
	return e.Resource + "." + e.APIGroup + "/" + e.Subresource
}

// Report is the profile of everything read.
type Report struct {
	Files []string `json:"files"`
	Read  Stats    `json:"read"`
	// From and To are the first and last request's receipt.
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Seconds float64   `json:"seconds"`
	// Requests over all clients.
	Requests int64 `json:"requests"`
	// SeriesStart and BucketSeconds place each client's Series in time.
	SeriesStart   time.Time `json:"seriesStart"`
	BucketSeconds int64     `json:"bucketSeconds"`
	LatencySketch string    `json:"latencySketch"`
	// SortedBy is the order of Clients.
	SortedBy  string          `json:"sortedBy"`
	Clients   []ClientProfile `json:"clients"`
	Resources []ResourceCost  `json:"resources"`
}

// ClientProfile is one client: a user with one user agent (and one
// proxy, when it came through one).
type ClientProfile struct {
	// User and Groups are whom the API server authorised: for a request
	// that impersonated someone, the impersonated user.
	User      string   `json:"user"`
	UserAgent string   `json:"userAgent"`
	Groups    []string `json:"groups,omitempty"`
	// Proxy is the client that authenticated and impersonated User
	// (kubectl --as, an impersonating proxy, Rampart's gateway); empty
	// when User sent its requests itself.
	Proxy string `json:"proxy,omitempty"`
	// Kind is control-plane, node, service-account or user; Component
	// names a control-plane or node component.
	Kind      string `json:"kind"`
	Component string `json:"component,omitempty"`

	Requests int64 `json:"requests"`
	// RatePerSecond is the mean over the whole profile.
	RatePerSecond float64 `json:"ratePerSecond"`
	// PeakPerSecond is the most requests received in one second, at
	// PeakAt; the LIST peaks are per second too.
	PeakPerSecond            int64     `json:"peakPerSecond"`
	PeakAt                   time.Time `json:"peakAt"`
	PeakListsPerSecond       int64     `json:"peakListsPerSecond"`
	PeakListObjectsPerSecond int64     `json:"peakListObjectsPerSecond"`
	// PeakInFlight is the most of its short requests (not watches) the
	// API server was serving at once, from each request's receipt and
	// latency; PeakListsInFlight the same of its LISTs; PeakSeats the
	// most API Priority and Fairness seats they held at once (see Seats),
	// PeakListSeats those its LISTs held.
	PeakInFlight      int64 `json:"peakInFlight"`
	PeakListsInFlight int64 `json:"peakListsInFlight"`
	PeakSeats         int64 `json:"peakSeats"`
	PeakListSeats     int64 `json:"peakListSeats"`

	ByVerb     map[string]int64 `json:"byVerb"`
	ByResource map[string]int64 `json:"byResource"`

	Lists int64 `json:"lists"`
	// ListObjects are the objects of the LISTs whose answer was counted
	// (traffic log; audit at level Response or RequestResponse);
	// ListsUncounted are the LISTs whose answer the log does not show.
	ListObjects    int64 `json:"listObjects"`
	ListsUncounted int64 `json:"listsUncounted"`
	ListBytes      int64 `json:"listBytes"`
	Watches        int64 `json:"watches"`
	// WatchEvents are the events its watches sent, ResponseBytes the
	// bytes of the answers whose size the log shows (every answer in
	// the traffic log; LISTs at audit level Response).
	WatchEvents   int64 `json:"watchEvents"`
	ResponseBytes int64 `json:"responseBytes"`

	// Errors are 5xx answers, Throttled 429s from the API server,
	// ClientErrors other 4xx, RefusedByGateway the gateway's refusals.
	Errors           int64   `json:"errors"`
	Throttled        int64   `json:"throttled"`
	ClientErrors     int64   `json:"clientErrors"`
	RefusedByGateway int64   `json:"refusedByGateway"`
	ErrorRate        float64 `json:"errorRate"`
	ThrottledRate    float64 `json:"throttledRate"`

	// ServerSeconds is the time the API server spent answering the
	// client's short requests (not watches): its load on the server when
	// object counts are unknown, as they are in Metadata audit logs.
	ServerSeconds float64 `json:"serverSeconds"`
	// LatencyP50 and LatencyP99 (milliseconds) are of short requests.
	LatencyP50 float64 `json:"latencyP50Millis"`
	LatencyP99 float64 `json:"latencyP99Millis"`

	// Series is requests per bucket of BucketSeconds from SeriesStart.
	Series []int64 `json:"series"`
}

// Name is how tables and charts show the client.
func (c *ClientProfile) Name() string {
	if c.Component != "" && c.Kind == KindControlPlane {
		return c.Component
	}
	agent := c.UserAgent
	if len(agent) > 40 {
		agent = agent[:37] + "..."
	}
	if c.Proxy != "" {
		return fmt.Sprintf("%s (%s) via %s", c.User, agent, c.Proxy)
	}
	return fmt.Sprintf("%s (%s)", c.User, agent)
}

// ResourceCost is the load on one resource.
type ResourceCost struct {
	Resource       string  `json:"resource"`
	Requests       int64   `json:"requests"`
	Lists          int64   `json:"lists"`
	ListObjects    int64   `json:"listObjects"`
	ListsUncounted int64   `json:"listsUncounted"`
	ListBytes      int64   `json:"listBytes"`
	ServerSeconds  float64 `json:"serverSeconds"`
}

// The orders of a report's clients.
var SortKeys = []string{"server-time", "requests", "peak", "list-objects"}

// Report returns the profile, clients sorted by sortBy (one of SortKeys).
func (p *Profiler) Report(sortBy string) (Report, error) {
	if !slices.Contains(SortKeys, sortBy) {
		return Report{}, fmt.Errorf("--sort %q: use one of %v", sortBy, SortKeys)
	}
	r := Report{
		From: p.from, To: p.to, Seconds: p.to.Sub(p.from).Seconds(), Requests: p.requests,
		SeriesStart: p.origin, BucketSeconds: p.bucket, LatencySketch: SketchName, SortedBy: sortBy,
	}
	span := max(r.Seconds, 1)
	p.flights.flush()
	for _, c := range p.clients {
		for i := range c.ring {
			c.settle(&c.ring[i])
		}
		cp := c.p
		cp.RatePerSecond = float64(cp.Requests) / span
		cp.ErrorRate = float64(cp.Errors) / float64(cp.Requests)
		cp.ThrottledRate = float64(cp.Throttled) / float64(cp.Requests)
		if c.latency.Count() > 0 {
			cp.LatencyP50 = c.latency.Query(0.5) * 1000
			cp.LatencyP99 = c.latency.Query(0.99) * 1000
		}
		cp.Series = c.series
		r.Clients = append(r.Clients, cp)
	}
	key := map[string]func(c *ClientProfile) float64{
		"server-time":  func(c *ClientProfile) float64 { return c.ServerSeconds },
		"requests":     func(c *ClientProfile) float64 { return float64(c.Requests) },
		"peak":         func(c *ClientProfile) float64 { return float64(c.PeakPerSecond) },
		"list-objects": func(c *ClientProfile) float64 { return float64(c.ListObjects) },
	}[sortBy]
	slices.SortFunc(r.Clients, func(a, b ClientProfile) int {
		return cmp.Or(cmp.Compare(key(&b), key(&a)), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.User, b.User), cmp.Compare(a.UserAgent, b.UserAgent), cmp.Compare(a.Proxy, b.Proxy))
	})
	for _, res := range p.resources {
		r.Resources = append(r.Resources, *res)
	}
	slices.SortFunc(r.Resources, func(a, b ResourceCost) int {
		return cmp.Or(cmp.Compare(b.ServerSeconds, a.ServerSeconds), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Resource, b.Resource))
	})
	return r, nil
}
