package traffic

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

const (
	// activeFor is how long a client counts as active after its last
	// request when a Policy bucket is shared: long enough that a client
	// polling every few seconds keeps its share, short enough that the
	// share returns to the others soon after it stops.
	activeFor = 5 * time.Second
	// forgetAfter drops the state of a key idle this long.
	forgetAfter = time.Minute
	// sweepEvery bounds how often the active clients are recounted.
	sweepEvery = time.Second
	// MaxKeys bounds the buckets of one policy; keys beyond it share one
	// overflow bucket, so a client inventing user agents cannot grow the
	// gateway's memory.
	MaxKeys = 10000
	// overflowKey owns the bucket of keys beyond MaxKeys.
	overflowKey = "\x00overflow"
)

// Verdict is the answer of the limiter and of the list and watch guards
// for one request: the verdict, and for an admitted request the release
// of what it holds while it runs (Done). A refusal's Reason is "rate" or
// "in-flight" from the limiter, one of the Reason constants from the
// guards; its RetryAfter is how long until it would be admitted, as far as
// the bucket knows (0 for in-flight and open-watch refusals), which the
// gateway spreads before sending it (Spread).
type Verdict struct {
	verdict.Verdict

	release func()
}

// admit is the verdict of an admitted request that holds nothing.
var admit = Verdict{Verdict: verdict.Allow}

// Done ends an admitted request: its in-flight slot is free again.
func (v Verdict) Done() {
	if v.release != nil {
		v.release()
	}
}

// Limiter holds the buckets and in-flight counts of every Limit policy.
// It is safe for concurrent use.
type Limiter struct {
	mu       sync.Mutex
	policies map[string]*policyState
}

// NewLimiter returns an empty limiter.
func NewLimiter() *Limiter { return &Limiter{policies: map[string]*policyState{}} }

type policyState struct {
	generation  int64
	qps         float64 // 0: no rate limit
	burst       int
	maxInFlight int // 0: no concurrency limit
	key         v1alpha1.TrafficLimitKey
	fair        v1alpha1.FairShare

	shared    *rate.Limiter // key Policy only
	inFlight  int
	keys      map[string]*keyState
	active    int
	lastSweep time.Time
}

type keyState struct {
	bucket   *rate.Limiter
	inFlight int
	lastSeen time.Time
}

// Forget drops the state of policies not in keep, e.g. deleted ones.
func (l *Limiter) Forget(keep []Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := map[string]bool{}
	for _, p := range keep {
		names[p.Name] = true
	}
	for name := range l.policies {
		if !names[name] {
			delete(l.policies, name)
		}
	}
}

// Decide decides whether policy p (action Limit) admits r now. An admitted
// request must call Done when it ends. Long-running requests (watches)
// take a token but no in-flight slot.
func (l *Limiter) Decide(p *Policy, r Request, now time.Time) Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(p, now)
	s.sweep(now)
	k, name := s.keyFor(r, now)
	long := r.LongRunning()
	var held *rate.Reservation
	var overShare time.Duration // > 0: over its share, admitted only from spare capacity
	if k != nil {
		if s.maxInFlight > 0 && !long && k.inFlight >= s.keyInFlight() {
			return refuse("in-flight", 0, s.keyMessage(p, name, "in-flight"))
		}
		if s.qps > 0 {
			if held = k.bucket.ReserveN(now, 1); held.DelayFrom(now) > 0 {
				wait := held.DelayFrom(now)
				held.CancelAt(now)
				held = nil
				if !s.shares() {
					return refuse("rate", wait, s.keyMessage(p, name, "rate"))
				}
				overShare = wait
			}
		}
	}
	if s.key == v1alpha1.KeyPolicy {
		if s.maxInFlight > 0 && !long && s.inFlight >= s.maxInFlight {
			giveBack(held, now) // the policy refused it, not the client's share
			return refuse("in-flight", 0, s.policyMessage(p, "in-flight"))
		}
		switch {
		case s.qps == 0:
		case overShare > 0:
			// Over its share, a client may still use what the others
			// leave unused: tokens beyond a reserve of one share of the
			// burst, kept for a client within its share. The limit is
			// fair when contended and wastes nothing when not.
			if s.shared.TokensAt(now) < float64(s.reserve())+1 {
				return refuse("rate", overShare, s.keyMessage(p, name, "rate"))
			}
			s.shared.ReserveN(now, 1)
		default:
			res := s.shared.ReserveN(now, 1)
			// A client within its fair share is admitted even when the
			// policy's bucket is empty (someone over their share drained
			// it just before): the bucket goes into debt, at most one
			// burst, which the clients over their share pay back by
			// waiting longer. Without this, a newcomer's first requests
			// would be refused until the shares are recounted.
			inShare := held != nil && res.DelayFrom(now) <= s.maxDebt()
			if wait := res.DelayFrom(now); wait > 0 && !inShare {
				res.CancelAt(now)
				giveBack(held, now)
				return refuse("rate", wait, s.policyMessage(p, "rate"))
			}
		}
	}
	if long || s.maxInFlight == 0 {
		return admit
	}
	s.inFlight++
	if k != nil {
		k.inFlight++
	}
	var once sync.Once
	return Verdict{Verdict: verdict.Allow, release: func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			s.inFlight--
			if k != nil {
				k.inFlight--
			}
		})
	}}
}

// giveBack returns a client's token when the policy, not the client's
// share, refused the request.
func giveBack(r *rate.Reservation, now time.Time) {
	if r != nil {
		r.CancelAt(now)
	}
}

// refuse is a refusal for reason. An unpaginated LIST is Forbidden, not
// Throttled (403, not 429): retrying it unchanged can never succeed, and
// client-go's REST client retries a 429 (honouring Retry-After, up to 10
// times) while it returns a 403 at once; kubectl prints the message
// ("Error from server (Forbidden): ..."), and a reflector falls back to
// its own exponential backoff, not a hot loop. Everything else is "retry
// later": Throttled, 429 with Retry-After.
func refuse(reason string, wait time.Duration, msg string) Verdict {
	kind := verdict.Throttled
	if reason == ReasonUnpaginated {
		kind = verdict.Forbidden
	}
	return Verdict{Verdict: verdict.Verdict{Reason: reason, Message: msg, RetryAfter: wait, Refusal: kind}}
}

// state returns p's state, new if p is new or was edited.
func (l *Limiter) state(p *Policy, now time.Time) *policyState {
	if s, ok := l.policies[p.Name]; ok && s.generation == p.Generation {
		return s
	}
	lim := p.Spec.Limit
	if lim == nil {
		lim = &v1alpha1.TrafficLimit{}
	}
	s := &policyState{generation: p.Generation, key: lim.Key, fair: lim.FairShare, keys: map[string]*keyState{}, lastSweep: now}
	if s.key == "" {
		s.key = v1alpha1.KeyPolicy
	}
	if s.fair == "" {
		s.fair = v1alpha1.FairShareUser
	}
	if lim.QPS != nil {
		s.qps = float64(*lim.QPS)
		s.burst = int(*lim.QPS)
		if lim.Burst != nil {
			s.burst = int(*lim.Burst)
		}
	}
	if lim.MaxInFlight != nil {
		s.maxInFlight = int(*lim.MaxInFlight)
	}
	if s.key == v1alpha1.KeyPolicy {
		s.shared = rate.NewLimiter(rate.Limit(s.qps), s.burst)
	}
	l.policies[p.Name] = s
	return s
}

// keyFor returns the bucket r is charged to besides the policy's own:
// its key's (key User or UserAgent) or its client's share (key Policy
// with a fair share); nil when there is none.
func (s *policyState) keyFor(r Request, now time.Time) (*keyState, string) {
	var name string
	switch {
	case s.key == v1alpha1.KeyUser, s.key == v1alpha1.KeyPolicy && s.fair == v1alpha1.FairShareUser:
		name = r.User
	case s.key == v1alpha1.KeyUserAgent, s.key == v1alpha1.KeyPolicy && s.fair == v1alpha1.FairShareUserAgent:
		name = r.UserAgent
	default:
		return nil, ""
	}
	id := name
	k, ok := s.keys[id]
	if !ok && len(s.keys) >= MaxKeys {
		id = overflowKey
		k, ok = s.keys[id]
	}
	if !ok {
		k = &keyState{bucket: rate.NewLimiter(rate.Limit(s.qps), s.burst), lastSeen: now}
		s.keys[id] = k
		if s.shares() {
			s.active++
			s.reshare(now)
		}
	}
	k.lastSeen = now
	return k, name
}

// shares says whether keys split the policy's limit (key Policy with a
// fair share) rather than each having all of it.
func (s *policyState) shares() bool { return s.key == v1alpha1.KeyPolicy }

// sweep, at most once a second, forgets idle keys and recounts the active
// clients a shared limit is divided between.
func (s *policyState) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < sweepEvery {
		return
	}
	s.lastSweep = now
	active := 0
	for id, k := range s.keys {
		idle := now.Sub(k.lastSeen)
		if k.inFlight == 0 && idle > forgetAfter {
			delete(s.keys, id)
			continue
		}
		if k.inFlight > 0 || idle <= activeFor {
			active++
		}
	}
	if s.shares() && active != s.active {
		s.active = active
		s.reshare(now)
	}
}

// reshare gives every client of a shared limit an equal part of it.
func (s *policyState) reshare(now time.Time) {
	if s.qps == 0 {
		return
	}
	n := float64(max(s.active, 1))
	for _, k := range s.keys {
		k.bucket.SetLimitAt(now, rate.Limit(s.qps/n))
		k.bucket.SetBurstAt(now, max(1, int(math.Ceil(float64(s.burst)/n))))
	}
}

// keyInFlight is the in-flight limit of one key: all of it with its own
// bucket, an equal share of the policy's when shared.
func (s *policyState) keyInFlight() int {
	if !s.shares() {
		return s.maxInFlight
	}
	return max(1, int(math.Ceil(float64(s.maxInFlight)/float64(max(s.active, 1)))))
}

func (s *policyState) keyMessage(p *Policy, name, reason string) string {
	who := "user"
	if s.key == v1alpha1.KeyUserAgent || s.key == v1alpha1.KeyPolicy && s.fair == v1alpha1.FairShareUserAgent {
		who = "user agent"
	}
	if !s.shares() {
		if reason == "in-flight" {
			return fmt.Sprintf("TrafficPolicy %q allows each %s at most %d requests in flight; %s %q has that many running. Wait for them to finish, or ask the cluster's operators to raise the limit (kubectl get trafficpolicy %s -o yaml)",
				p.Name, who, s.maxInFlight, who, name, p.Name)
		}
		return fmt.Sprintf("TrafficPolicy %q allows each %s %s; %s %q is over it. Slow down, or ask the cluster's operators to raise the limit (kubectl get trafficpolicy %s -o yaml)",
			p.Name, who, s.rateText(), who, name, p.Name)
	}
	if reason == "in-flight" {
		return fmt.Sprintf("TrafficPolicy %q shares %d requests in flight fairly between the %d %ss using it; %s %q has its share (%d) running. Wait for them to finish (kubectl get trafficpolicy %s -o yaml shows the limit)",
			p.Name, s.maxInFlight, s.active, who, who, name, s.keyInFlight(), p.Name)
	}
	return fmt.Sprintf("TrafficPolicy %q shares %s fairly between the %d %ss using it; %s %q is over its share (%.3g requests/s) and the others leave none spare. Slow down (kubectl get trafficpolicy %s -o yaml shows the limit)",
		p.Name, s.rateText(), s.active, who, who, name, s.qps/float64(max(s.active, 1)), p.Name)
}

func (s *policyState) policyMessage(p *Policy, reason string) string {
	if reason == "in-flight" {
		return fmt.Sprintf("TrafficPolicy %q allows at most %d requests in flight for everything it matches, and that many are running. Retry later (kubectl get trafficpolicy %s -o yaml shows the limit)",
			p.Name, s.maxInFlight, p.Name)
	}
	return fmt.Sprintf("TrafficPolicy %q allows %s for everything it matches, and that is used up. Retry later (kubectl get trafficpolicy %s -o yaml shows the limit)",
		p.Name, s.rateText(), p.Name)
}

// reserve is the tokens of a shared bucket that clients over their share
// may not take: one client's share of the burst.
func (s *policyState) reserve() int {
	return max(1, int(math.Ceil(float64(s.burst)/float64(max(s.active, 1)))))
}

// maxDebt is how far a fair-share policy's bucket may go into debt: one
// burst's worth of time.
func (s *policyState) maxDebt() time.Duration {
	return time.Duration(float64(s.burst) / s.qps * float64(time.Second))
}

func (s *policyState) rateText() string {
	return fmt.Sprintf("%g requests/s (burst %d)", s.qps, s.burst)
}

// Spread is a refusal as the gateway sends it, its RetryAfter in whole
// seconds. A Forbidden refusal (an unpaginated LIST) has none: retrying
// it as it is cannot succeed. A storm refusal's wait is already spread
// over the storm (DecideWatch) and is only rounded up. Others, the
// limiter's and the breaker's included, wait at least one second, plus up
// to as much again drawn from jitter (in [0, 1)), so that clients refused
// together do not all come back in the same second.
func Spread(v verdict.Verdict, jitter float64) verdict.Verdict {
	switch {
	case v.Refusal == verdict.Forbidden:
		v.RetryAfter = 0
	case v.Reason == ReasonWatchStorm:
		v.RetryAfter = time.Duration(max(1, int((v.RetryAfter+time.Second-1)/time.Second))) * time.Second
	default:
		base := max(1, int(math.Ceil(v.RetryAfter.Seconds())))
		v.RetryAfter = time.Duration(base+int(jitter*float64(base+1))) * time.Second
	}
	return v
}
