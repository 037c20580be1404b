// Package upstream spreads the gateway's requests over several
// kube-apiservers: least in flight among the available ones, each kept or
// taken out by active /readyz checks and by the errors requests meet, and a
// server that comes back eased in over a slow start instead of receiving
// the whole backlog at once.
package upstream

import (
	"math"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// Options tune the pool.
type Options struct {
	// EjectAfter consecutive failed requests take a server out for
	// EjectFor (passive ejection).
	EjectAfter int
	EjectFor   time.Duration
	// SlowStart is how long a server that became available takes to
	// receive its full share; it starts at a tenth.
	SlowStart time.Duration
}

// Defaults are the options of `rampart gateway` unless flags say otherwise.
var Defaults = Options{EjectAfter: 3, EjectFor: 10 * time.Second, SlowStart: 10 * time.Second}

// Server is one kube-apiserver behind the gateway.
type Server struct {
	URL *url.URL
	// InFlight counts short requests running on it; Streams counts
	// watches and other long-running requests, balanced separately so that
	// a server holding many watches still takes its share of short ones.
	InFlight atomic.Int64
	Streams  atomic.Int64
	// Requests counts every request sent to it, retries included.
	Requests atomic.Int64

	mu sync.Mutex
	// ready is what the last /readyz check said.
	ready bool
	// failures counts consecutive failed requests.
	failures     int
	ejectedUntil time.Time
	// availableSince is when it last became available, for slow start.
	availableSince time.Time
}

// Pool is a set of servers that requests are balanced over.
type Pool struct {
	// Name is the pool's name: DefaultPool, or one of the gateway's
	// --upstream-pool names.
	Name    string
	Servers []*Server
	opts    Options
	next    atomic.Uint64
}

// DefaultPool is the name of the pool requests go to unless a
// TrafficPolicy routes them elsewhere.
const DefaultPool = traffic.DefaultPool

// NewPool makes the default pool of urls, all assumed ready until
// checked; it starts them with a full share, since nothing has failed yet.
func NewPool(urls []*url.URL, opts Options, now time.Time) *Pool {
	return NewNamedPool(DefaultPool, urls, opts, now)
}

// NewNamedPool makes the pool name of urls, as NewPool does.
func NewNamedPool(name string, urls []*url.URL, opts Options, now time.Time) *Pool {
	p := &Pool{Name: name, opts: opts}
	for _, u := range urls {
		p.Servers = append(p.Servers, &Server{URL: u, ready: true, availableSince: now.Add(-opts.SlowStart)})
	}
	return p
}

// available says whether s takes new requests.
func (s *Server) available(now time.Time) bool {
	return s.ready && !now.Before(s.ejectedUntil)
}

// weight is s's share during slow start: from 0.1 up to 1.
func (s *Server) weight(now time.Time, slowStart time.Duration) float64 {
	since := s.availableSince
	if s.ejectedUntil.After(since) {
		since = s.ejectedUntil
	}
	if slowStart <= 0 {
		return 1
	}
	return math.Min(1, math.Max(0.1, float64(now.Sub(since))/float64(slowStart)))
}

// Available says whether s takes new requests now (ready and not ejected).
func (s *Server) Available(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.available(now)
}

// Available says whether any of p's servers takes new requests now.
func (p *Pool) Available(now time.Time) bool {
	for _, s := range p.Servers {
		if s.Available(now) {
			return true
		}
	}
	return false
}

// Pools are the gateway's pools, the default one first.
type Pools []*Pool

// Default is the pool of requests no TrafficPolicy routes.
func (ps Pools) Default() *Pool { return ps[0] }

// Named is the pool called name, nil if there is none.
func (ps Pools) Named(name string) *Pool {
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Pick chooses the server for a request: the available one with the least
// load for its weight, counting short requests or, for long-running ones,
// streams. Servers in skip (already tried) are passed over. When none is
// available it picks among all: a server believed down may have come back,
// and trying beats refusing every request.
func (p *Pool) Pick(long bool, now time.Time, skip ...*Server) *Server {
	if s := p.pick(long, now, true, skip); s != nil {
		return s
	}
	return p.pick(long, now, false, skip)
}

func (p *Pool) pick(long bool, now time.Time, onlyAvailable bool, skip []*Server) *Server {
	n := len(p.Servers)
	// Rotate the starting point so that ties spread instead of all going
	// to the first server.
	start := int(p.next.Add(1) % uint64(n))
	var best *Server
	bestScore := math.Inf(1)
	for i := range n {
		s := p.Servers[(start+i)%n]
		if contains(skip, s) {
			continue
		}
		s.mu.Lock()
		ok, w := s.available(now), s.weight(now, p.opts.SlowStart)
		s.mu.Unlock()
		if onlyAvailable && !ok {
			continue
		}
		load := s.InFlight.Load()
		if long {
			load = s.Streams.Load()
		}
		if score := float64(load+1) / w; score < bestScore {
			best, bestScore = s, score
		}
	}
	return best
}

func contains(ss []*Server, s *Server) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Succeeded records a request s answered.
func (p *Pool) Succeeded(s *Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = 0
}

// Failed records a request s could not answer (no connection, a reset, a
// TLS failure); after EjectAfter in a row s is ejected for EjectFor and
// Failed reports true.
func (p *Pool) Failed(s *Server, now time.Time) (ejected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	if s.failures < p.opts.EjectAfter || now.Before(s.ejectedUntil) {
		return false
	}
	s.failures = 0
	s.ejectedUntil = now.Add(p.opts.EjectFor)
	return true
}

// Checked records the answer of an active /readyz check. A server that
// turns ready starts its slow start.
func (p *Pool) Checked(s *Server, ready bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready && !s.ready {
		s.availableSince = now
		s.failures = 0
		s.ejectedUntil = time.Time{}
	}
	s.ready = ready
}

// Weight is s's current share (0.1 to 1) during slow start, for metrics.
func (p *Pool) Weight(s *Server, now time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.available(now) {
		return 0
	}
	return s.weight(now, p.opts.SlowStart)
}
