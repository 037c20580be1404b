package traffic

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Refusal reasons of the list and watch guards, for metrics and for the
// kind of refusal (refuse).
const (
	ReasonListCost    = "list-cost"
	ReasonUnpaginated = "unpaginated-list"
	ReasonWatchMax    = "watch-max"
	ReasonWatchRate   = "watch-rate"
	ReasonWatchStorm  = "watch-storm"
)

// ObjectCounts is what the gateway knows of the objects of a LIST's
// resource. A count is only as good as its Known flag: the cluster total
// comes from the API server's own metric or from a synced watch, the
// namespace's only from a synced watch.
type ObjectCounts struct {
	Cluster        int64
	ClusterKnown   bool
	Namespace      int64
	NamespaceKnown bool
}

// ScopeObjects is the number of objects in r's scope: its namespace, or
// the whole cluster for a cluster-scoped or all-namespaces LIST; false
// when the gateway does not know it.
func ScopeObjects(r Request, c ObjectCounts) (int64, bool) {
	if r.Namespace == "" {
		return c.Cluster, c.ClusterKnown
	}
	return c.Namespace, c.NamespaceKnown
}

// ListCost estimates the objects a LIST, or a watch's initial events,
// will return: the objects in its scope, at most its limit where the API
// server honours it, at most one when a field selector names the object.
// Until a namespace's count is known, a namespaced request is priced at
// the cluster's count: an upper bound, used for the cost budget only, for
// the few moments until the resource's watch has synced. With no count
// at all it costs nothing: the gateway does not refuse on a guess. A
// watch that streams no initial state costs nothing.
func ListCost(r Request, c ObjectCounts) int64 {
	if r.Verb == "watch" && !r.InitialEvents() {
		return 0
	}
	n, ok := ScopeObjects(r, c)
	if !ok {
		if !c.ClusterKnown {
			return 0
		}
		n = c.Cluster
	}
	if limit := EffectiveLimit(r); limit > 0 {
		n = min(n, limit)
	}
	if r.SingleObject {
		n = min(n, 1)
	}
	return max(n, 0)
}

// EffectiveLimit is the page size the API server will honour for r: 0
// (everything) for a watch, and for a LIST from resourceVersion "0",
// which the watch cache serves whole whatever its limit (1.36,
// cacher.go computeListLimit: "the limit is ignored for requests that
// set RV == 0"), so that such a LIST is priced at its scope, not at a
// limit it will not get.
func EffectiveLimit(r Request) int64 {
	if r.Verb != "list" || r.ResourceVersion == "0" {
		return 0
	}
	return max(r.Limit, 0)
}

// Unpaginated says whether the API server would read r whole from etcd
// and build the whole answer in memory: no limit, and not from its cache
// (resourceVersion "0").
func Unpaginated(r Request) bool {
	return r.Limit <= 0 && r.ResourceVersion != "0"
}

// Guards holds the state of the list and watch guards of every Limit
// policy: per-client budgets of LIST cost, open watches and new-watch
// rates. It is safe for concurrent use.
type Guards struct {
	mu      sync.Mutex
	lists   map[string]*listState
	watches map[string]*watchState
}

// NewGuards returns empty guards.
func NewGuards() *Guards {
	return &Guards{lists: map[string]*listState{}, watches: map[string]*watchState{}}
}

// Forget drops the state of policies not in keep, e.g. deleted ones.
func (g *Guards) Forget(keep []Policy) {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := map[string]bool{}
	for _, p := range keep {
		names[p.Name] = true
	}
	for name := range g.lists {
		if !names[name] {
			delete(g.lists, name)
		}
	}
	for name := range g.watches {
		if !names[name] {
			delete(g.watches, name)
		}
	}
}

type listState struct {
	generation int64
	perSecond  float64 // 0: no cost budget
	burst      int
	key        v1alpha1.ClientKey
	clients    clients[*rate.Limiter]
}

// DecideList decides whether policy p's list guard admits the LIST r,
// given what the gateway knows of its resource's objects.
func (g *Guards) DecideList(p *Policy, r Request, counts ObjectCounts, now time.Time) Verdict {
	lg := p.Spec.List
	if lg == nil || r.Verb != "list" {
		return admit
	}
	// The refusal needs a real count of the scope: a namespaced LIST is
	// never refused because the cluster as a whole is large.
	if n, known := ScopeObjects(r, counts); lg.MaxUnpaginatedObjects != nil && Unpaginated(r) && !r.SingleObject && known && n > int64(*lg.MaxUnpaginatedObjects) {
		return refuse(ReasonUnpaginated, 0, fmt.Sprintf(
			"TrafficPolicy %q refuses LISTs that the API server would read whole from etcd when they hold more than %d objects, and %s holds %d. "+
				"Send limit=500 and follow metadata.continue (kubectl does so by default; client-go: ListOptions{Limit: 500} or k8s.io/client-go/tools/pager), "+
				"or resourceVersion=0 to be served from the API server's cache as informers are",
			p.Name, *lg.MaxUnpaginatedObjects, scopeText(r), n))
	}
	v, _ := g.chargeList(p, r, counts, now)
	return v
}

// Decide applies policy p's list and watch guards to r. A LIST is priced
// by DecideList. A watch that starts by streaming its scope's objects (an
// informer's watch-list, see Request.InitialEvents) is a LIST served from
// the watch cache: it is charged to the same object budget (never
// refused as unpaginated: it does not read etcd), and must also pass the
// watch guard; if the watch guard refuses it, the charge is given back.
// An admitted request must call Done when it ends.
func (g *Guards) Decide(p *Policy, r Request, counts ObjectCounts, now time.Time) Verdict {
	switch r.Verb {
	case "list":
		return g.DecideList(p, r, counts, now)
	case "watch":
		undo := func() {}
		if p.Spec.List != nil && r.InitialEvents() {
			var v Verdict
			if v, undo = g.chargeList(p, r, counts, now); !v.Allowed {
				return v
			}
		}
		v := g.DecideWatch(p, r, now)
		if !v.Allowed {
			undo()
		}
		return v
	}
	return admit
}

// chargeList takes r's cost from its client's object budget under p. On
// admission it returns how to give the charge back.
func (g *Guards) chargeList(p *Policy, r Request, counts ObjectCounts, now time.Time) (Verdict, func()) {
	nothing := func() {}
	if p.Spec.List.ObjectsPerSecond == nil {
		return admit, nothing
	}
	cost := ListCost(r, counts)
	if cost <= 0 {
		return admit, nothing
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.listState(p, now)
	// A client in debt is remembered until it has paid.
	s.clients.sweep(now, func(b *rate.Limiter) bool { return b.TokensAt(now) < 0 })
	name := clientName(s.key, r)
	bucket := s.clients.get(name, now, func() *rate.Limiter { return rate.NewLimiter(rate.Limit(s.perSecond), s.burst) })
	res, wait, ok := charge(bucket, int(min(cost, int64(maxCharge))), s.burst, s.perSecond, now)
	if ok {
		return admit, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			res.CancelAt(now)
		}
	}
	if r.Verb == "watch" {
		return refuse(ReasonListCost, wait, fmt.Sprintf(
			"TrafficPolicy %q gives each %s a LIST budget of %g objects/s (burst %d), and a watch that starts by sending every object (an informer's initial sync: sendInitialEvents=true, or no resourceVersion) is a LIST: "+
				"this one of %s costs about %d objects and %s %q has spent its budget: retry in %s. "+
				"client-go informers retry by themselves; start fewer at once and share them (one SharedInformerFactory per process), or resume watches from a resourceVersion",
			p.Name, keyText(s.key), s.perSecond, s.burst, scopeText(r), cost, keyText(s.key), name, wait.Round(100*time.Millisecond))), nothing
	}
	hint := "Paginate (limit=500), read from the API server's cache with resourceVersion=0 (an informer does so and then only watches), or LIST less often"
	if r.ResourceVersion == "0" {
		hint = "With resourceVersion=0 the API server's cache returns every object whatever the limit, so the LIST is priced whole: paginate (limit=500 without resourceVersion=0), " +
			"or LIST less often (an informer lists once and then only watches)"
	}
	return refuse(ReasonListCost, wait, fmt.Sprintf(
		"TrafficPolicy %q gives each %s a LIST budget of %g objects/s (burst %d); this LIST of %s costs about %d objects and %s %q has spent its budget: retry in %s. %s",
		p.Name, keyText(s.key), s.perSecond, s.burst, scopeText(r), cost, keyText(s.key), name, wait.Round(100*time.Millisecond), hint)), nothing
}

// maxCharge bounds one LIST's charge so that the int conversions below
// cannot overflow; no budget is anywhere near it.
const maxCharge = 1 << 30

// charge takes cost tokens from a client's bucket and returns the
// reservation, which gives them back if cancelled. A cost within the
// burst waits for its tokens like any reservation. A cost above the burst
// is admitted only from a full bucket and leaves it in debt: x/time/rate
// refuses a reservation above the burst, so the burst is raised to the
// cost for that one reservation and set back; the tokens go negative by
// cost-burst, and the client's next LIST waits until that is paid back at
// perSecond. (Cancelling it refills the bucket to the burst, which is
// where it was.)
func charge(b *rate.Limiter, cost, burst int, perSecond float64, now time.Time) (*rate.Reservation, time.Duration, bool) {
	if cost <= burst {
		res := b.ReserveN(now, cost)
		if wait := res.DelayFrom(now); wait > 0 {
			res.CancelAt(now)
			return nil, wait, false
		}
		return res, 0, true
	}
	if tokens := b.TokensAt(now); tokens < float64(burst) {
		return nil, time.Duration((float64(burst) - tokens) / perSecond * float64(time.Second)), false
	}
	b.SetBurstAt(now, cost)
	res := b.ReserveN(now, cost)
	b.SetBurstAt(now, burst)
	return res, 0, true
}

func (g *Guards) listState(p *Policy, now time.Time) *listState {
	if s, ok := g.lists[p.Name]; ok && s.generation == p.Generation {
		return s
	}
	lg := p.Spec.List
	s := &listState{generation: p.Generation, key: lg.Key, clients: newClients[*rate.Limiter](now)}
	if lg.ObjectsPerSecond != nil {
		s.perSecond = float64(*lg.ObjectsPerSecond)
		s.burst = int(*lg.ObjectsPerSecond)
		if lg.ObjectsBurst != nil {
			s.burst = int(*lg.ObjectsBurst)
		}
	}
	g.lists[p.Name] = s
	return s
}

func scopeText(r Request) string {
	res := r.Resource
	if r.APIGroup != "" {
		res += "." + r.APIGroup
	}
	if r.Namespace == "" {
		return res + " in the whole cluster"
	}
	return res + " in namespace " + r.Namespace
}

// clientName is who a request belongs to under key.
func clientName(key v1alpha1.ClientKey, r Request) string {
	if key == v1alpha1.ClientUserAgent {
		return r.UserAgent
	}
	return r.User
}

func keyText(key v1alpha1.ClientKey) string {
	if key == v1alpha1.ClientUserAgent {
		return "user agent"
	}
	return "user"
}

// clients holds per-client state in bounded memory, like the limiter's
// keys: clients beyond MaxKeys share one overflow entry, and entries idle
// for forgetAfter (and not held, see busy) are dropped.
type clients[T any] struct {
	m         map[string]*client[T]
	lastSweep time.Time
}

type client[T any] struct {
	v        T
	lastSeen time.Time
}

func newClients[T any](now time.Time) clients[T] {
	return clients[T]{m: map[string]*client[T]{}, lastSweep: now}
}

func (c *clients[T]) get(name string, now time.Time, newV func() T) T {
	e, ok := c.m[name]
	if !ok && len(c.m) >= MaxKeys {
		name = overflowKey
		e, ok = c.m[name]
	}
	if !ok {
		e = &client[T]{v: newV()}
		c.m[name] = e
	}
	e.lastSeen = now
	return e.v
}

// sweep, at most once a second, drops clients idle for forgetAfter
// unless busy says they still hold something (an open watch).
func (c *clients[T]) sweep(now time.Time, busy func(T) bool) {
	if now.Sub(c.lastSweep) < sweepEvery {
		return
	}
	c.lastSweep = now
	for name, e := range c.m {
		if now.Sub(e.lastSeen) > forgetAfter && (busy == nil || !busy(e.v)) {
			delete(c.m, name)
		}
	}
}
