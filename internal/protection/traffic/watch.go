package traffic

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

type watchState struct {
	generation   int64
	maxPerClient int     // 0: no cap
	perSecond    float64 // 0: no per-client rate
	burst        int
	policyRate   float64 // 0: no policy-wide rate
	key          v1alpha1.ClientKey
	policy       *rate.Limiter
	// next is the earliest time the storm schedule hands out to a
	// refused watch: each refusal takes the next 1/policyRate slot, so
	// the refused come back at about the policy's rate.
	next    time.Time
	clients clients[*watchClient]
}

type watchClient struct {
	open   int
	bucket *rate.Limiter // nil: no per-client rate
}

// DecideWatch decides whether policy p's watch guard admits the new watch
// r. An admitted watch must call Done when it ends, however it ends: the
// client's count of open watches goes down then.
func (g *Guards) DecideWatch(p *Policy, r Request, now time.Time) Verdict {
	if p.Spec.Watch == nil || r.Verb != "watch" {
		return admit
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.watchState(p, now)
	s.clients.sweep(now, func(c *watchClient) bool { return c.open > 0 })
	name := clientName(s.key, r)
	c := s.clients.get(name, now, s.newClient)
	who := keyText(s.key)
	if s.maxPerClient > 0 && c.open >= s.maxPerClient {
		return refuse(ReasonWatchMax, 0, fmt.Sprintf(
			"TrafficPolicy %q allows each %s %d open watches and %s %q holds %d. Close watches it no longer needs, or share one watch per resource (one client-go SharedInformerFactory per process), then retry",
			p.Name, who, s.maxPerClient, who, name, c.open))
	}
	var own *rate.Reservation
	if c.bucket != nil {
		if own = c.bucket.ReserveN(now, 1); own.DelayFrom(now) > 0 {
			wait := own.DelayFrom(now)
			own.CancelAt(now)
			return refuse(ReasonWatchRate, wait, fmt.Sprintf(
				"TrafficPolicy %q allows each %s %g new watches/s (burst %d) and %s %q is over it. Retry after Retry-After; keep watches open and share them (client-go shared informers) rather than reopening them",
				p.Name, who, s.perSecond, s.burst, who, name))
		}
	}
	if s.policy != nil {
		res := s.policy.ReserveN(now, 1)
		if wait := res.DelayFrom(now); wait > 0 {
			res.CancelAt(now)
			giveBack(own, now) // the storm refused it, not the client's rate
			slot := s.next
			if earliest := now.Add(wait); slot.Before(earliest) {
				slot = earliest
			}
			s.next = slot.Add(time.Duration(float64(time.Second) / s.policyRate))
			back := slot.Sub(now)
			return refuse(ReasonWatchStorm, back, fmt.Sprintf(
				"TrafficPolicy %q admits %g new watches/s from all its clients together and more are reconnecting at once; this watch is given a turn in %ds (Retry-After) so that the storm is spread out. client-go informers retry the watch without relisting; other clients should retry the watch, not relist",
				p.Name, s.policyRate, max(1, int((back+time.Second-1)/time.Second))))
		}
	}
	c.open++
	var once sync.Once
	return Verdict{Verdict: verdict.Allow, release: func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			c.open--
		})
	}}
}

func (s *watchState) newClient() *watchClient {
	c := &watchClient{}
	if s.perSecond > 0 {
		c.bucket = rate.NewLimiter(rate.Limit(s.perSecond), s.burst)
	}
	return c
}

// watchState returns p's watch state, new if p is new or was edited. An
// edited policy keeps the open-watch counts: the watches are still open.
func (g *Guards) watchState(p *Policy, now time.Time) *watchState {
	old, ok := g.watches[p.Name]
	if ok && old.generation == p.Generation {
		return old
	}
	wg := p.Spec.Watch
	s := &watchState{generation: p.Generation, key: wg.Key, clients: newClients[*watchClient](now)}
	if wg.MaxPerClient != nil {
		s.maxPerClient = int(*wg.MaxPerClient)
	}
	if wg.NewPerSecond != nil {
		s.perSecond = float64(*wg.NewPerSecond)
		s.burst = int(*wg.NewPerSecond)
		if wg.NewBurst != nil {
			s.burst = int(*wg.NewBurst)
		}
	}
	if wg.PolicyNewPerSecond != nil {
		s.policyRate = float64(*wg.PolicyNewPerSecond)
		// One second's worth at once: a storm is admitted at the rate,
		// not in one burst.
		s.policy = rate.NewLimiter(rate.Limit(s.policyRate), int(*wg.PolicyNewPerSecond))
	}
	if ok {
		// The same client records carry over, so that releases of
		// watches opened before the edit still count down; only their
		// rate buckets are new.
		for name, e := range old.clients.m {
			if e.v.open > 0 {
				e.v.bucket = s.newClient().bucket
				s.clients.m[name] = e
			}
		}
	}
	g.watches[p.Name] = s
	return s
}
