package breaker

import (
	"sync"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// Set is the breakers of a gateway, one per policy with a breaker, and
// the window of answers they judge by. It is safe for concurrent use.
type Set struct {
	Window Window

	mu       sync.Mutex
	breakers map[string]*Breaker
}

// NewSet is a set without breakers.
func NewSet() *Set { return &Set{breakers: map[string]*Breaker{}} }

// ReasonOpen is the Reason of a breaker's refusals: it is open, or not
// yet letting this request back.
const ReasonOpen = "breaker"

// Decide advances policy's breaker by its spec and the clock (the window
// is judged by Tick) and says whether it lets a request through. A
// refusal is Throttled, and its RetryAfter is when the breaker expects
// to let requests back.
func (s *Set) Decide(policy string, cfg Config, now time.Time, draw float64) (verdict.Verdict, []Transition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ts := s.get(policy, cfg, now)
	ts = append(ts, named(policy, b.Advance(cfg, false, false, "", now))...)
	if b.Admits(cfg, now, draw) {
		return verdict.Allow, ts
	}
	msg, wait := b.Refusal(policy, cfg, now)
	return verdict.Verdict{Reason: ReasonOpen, Message: msg, RetryAfter: wait, Refusal: verdict.Throttled}, ts
}

// Configured is a policy with a breaker.
type Configured struct {
	Policy string
	Config Config
}

// Tick judges the window for every breaker in ps and advances them;
// breakers of policies not in ps are forgotten.
func (s *Set) Tick(ps []Configured, now time.Time) []Transition {
	summaries := map[int]*Summary{}
	var out []Transition
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := map[string]bool{}
	for _, p := range ps {
		keep[p.Policy] = true
		b, ts := s.get(p.Policy, p.Config, now)
		out = append(out, ts...)
		judged, distressed, reason := false, false, ""
		if t := p.Config.Trip; t != nil {
			sum, ok := summaries[t.ForSeconds]
			if !ok {
				v := s.Window.Summarize(now, t.ForSeconds)
				sum = &v
				summaries[t.ForSeconds] = sum
			}
			judged = true
			reason, distressed = Decide(*t, sum)
		}
		out = append(out, named(p.Policy, b.Advance(p.Config, judged, distressed, reason, now))...)
	}
	for name := range s.breakers {
		if !keep[name] {
			delete(s.breakers, name)
		}
	}
	return out
}

// Snapshot is a copy of policy's breaker, if it has one.
func (s *Set) Snapshot(policy string) (Breaker, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.breakers[policy]
	if !ok {
		return Breaker{}, false
	}
	return *b, true
}

// Resume gives policy the breaker a restarted gateway goes on with (see
// Resume), unless it has one already, and advances it by cfg. The state
// resumed is returned as a transition from no state (""), then any
// transitions made.
func (s *Set) Resume(policy string, cfg Config, st v1alpha1.GatewayBreakerStatus, now time.Time) []Transition {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.breakers[policy]; ok {
		return nil
	}
	b := Resume(cfg, st, now)
	s.breakers[policy] = b
	ts := []Transition{{Policy: policy, To: b.State, Reason: b.Reason, At: b.Since}}
	return append(ts, named(policy, b.Advance(cfg, false, false, "", now))...)
}

// get returns policy's breaker, new (Closed) if it had none: then the
// transition into Closed from no state ("") is returned.
func (s *Set) get(policy string, cfg Config, now time.Time) (*Breaker, []Transition) {
	if b, ok := s.breakers[policy]; ok {
		return b, nil
	}
	b := New(cfg, now)
	s.breakers[policy] = b
	return b, []Transition{{Policy: policy, To: Closed, Reason: "new breaker", At: now}}
}

func named(policy string, ts []Transition) []Transition {
	for i := range ts {
		ts[i].Policy = policy
	}
	return ts
}
