package breaker

import (
	"fmt"
	"strings"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// The states, as status.breakers shows them.
const (
	Closed  = v1alpha1.BreakerClosed
	Open    = v1alpha1.BreakerOpen
	Ramping = v1alpha1.BreakerRamping
)

// Config is a policy's spec.breaker, with the API's defaults applied.
type Config struct {
	// Open is spec.breaker.open: open by hand.
	Open bool
	// Ramp is how long the admitted share takes to grow from none to all.
	Ramp time.Duration
	// Trip is nil when the breaker opens only by hand.
	Trip *Trip
	// ClosedAt is spec.breaker.closedAt: an operator's last close by
	// hand, which ends an automatic open too; zero if never.
	ClosedAt time.Time
}

// Trip is spec.breaker.trip; a zero threshold is not judged.
type Trip struct {
	ErrorPercent           int
	TooManyRequestsPercent int
	Latency                time.Duration
	ForSeconds             int
	MinRequestsPerSecond   int
	OpenFor                time.Duration
}

// ConfigOf reads spec.breaker. The API server applies the defaults; they
// are applied here too for policies written before them.
func ConfigOf(b *v1alpha1.TrafficBreaker) Config {
	c := Config{Open: b.Open, Ramp: time.Duration(b.RampSeconds) * time.Second}
	if b.ClosedAt != nil {
		c.ClosedAt = b.ClosedAt.Time
	}
	if t := b.Trip; t != nil {
		c.Trip = &Trip{
			ForSeconds:           int(orDefault(t.ForSeconds, 10)),
			MinRequestsPerSecond: int(orDefault(t.MinRequestsPerSecond, 5)),
			OpenFor:              time.Duration(orDefault(t.OpenSeconds, 30)) * time.Second,
		}
		if t.ErrorPercent != nil {
			c.Trip.ErrorPercent = int(*t.ErrorPercent)
		}
		if t.TooManyRequestsPercent != nil {
			c.Trip.TooManyRequestsPercent = int(*t.TooManyRequestsPercent)
		}
		if t.LatencyMilliseconds != nil {
			c.Trip.Latency = time.Duration(*t.LatencyMilliseconds) * time.Millisecond
		}
	}
	return c
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// trippedPrefix starts the reason of every automatic open: a restarted
// gateway resumes only those (an open by hand is in spec).
const trippedPrefix = "tripped: "

// Decide says whether the answers s summarizes show the API servers in
// distress by t's thresholds, and if so which threshold with the measured
// value. Below t's minimum rate of answers nothing is distress.
func Decide(t Trip, s *Summary) (reason string, distressed bool) {
	if s.Answers == 0 || s.Answers < t.MinRequestsPerSecond*s.Seconds {
		return "", false
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(s.Answers) }
	over := fmt.Sprintf("over the last %ds (%d answers)", s.Seconds, s.Answers)
	if t.ErrorPercent > 0 && pct(s.Errors) >= float64(t.ErrorPercent) {
		return fmt.Sprintf(trippedPrefix+"5xx answers %.0f%% >= errorPercent %d %s", pct(s.Errors), t.ErrorPercent, over), true
	}
	if t.TooManyRequestsPercent > 0 && pct(s.TooMany) >= float64(t.TooManyRequestsPercent) {
		return fmt.Sprintf(trippedPrefix+"429 answers %.0f%% >= tooManyRequestsPercent %d %s", pct(s.TooMany), t.TooManyRequestsPercent, over), true
	}
	if t.Latency > 0 && s.Short > 0 {
		if p90 := s.Percentile(0.9); p90 > t.Latency {
			return fmt.Sprintf(trippedPrefix+"p90 latency of short requests %s > latencyMilliseconds %d %s",
				p90.Round(10*time.Microsecond), t.Latency.Milliseconds(), over), true
		}
	}
	return "", false
}

// Breaker is one policy's circuit breaker in one gateway.
type Breaker struct {
	State  v1alpha1.BreakerState
	Since  time.Time
	Reason string
	// byHand: Open because spec.breaker.open says so, until it is false;
	// otherwise an Open breaker tripped and ramps back at openUntil.
	byHand    bool
	openUntil time.Time
	// distressSince is when the judgements began to say distress, zero
	// while they do not: a threshold must stay crossed for forSeconds.
	distressSince time.Time
	// closedAt is the spec.breaker.closedAt this breaker last saw: a
	// change is an operator closing it by hand.
	closedAt time.Time
}

// New is a Closed breaker of a policy with spec cfg. The close by hand
// cfg already names happened before this breaker: only a later one is
// acted on.
func New(cfg Config, now time.Time) *Breaker {
	return &Breaker{State: Closed, Since: now, closedAt: cfg.ClosedAt}
}

// Resume is the breaker of a gateway that restarts, from the entry of
// status.breakers it wrote before (st): an automatic open stays open for
// the rest of its openSeconds, a ramp goes on where it was, and an open
// or ramp that an operator closed since (cfg.ClosedAt after st.Since)
// ramps from that close. Anything else starts Closed: an open by hand is
// spec.breaker.open, which Advance applies.
func Resume(cfg Config, st v1alpha1.GatewayBreakerStatus, now time.Time) *Breaker {
	b := New(cfg, now)
	since := st.Since.Time
	switch {
	case st.State != Open && st.State != Ramping:
	case !cfg.ClosedAt.IsZero() && cfg.ClosedAt.After(since):
		b.State, b.Since, b.Reason = Ramping, cfg.ClosedAt, "closed by hand while this gateway was down"
	case st.State == Ramping:
		b.State, b.Since, b.Reason = Ramping, since, st.Reason
	case strings.HasPrefix(st.Reason, trippedPrefix):
		b.State, b.Since, b.Reason, b.openUntil = Open, since, st.Reason, since
		if cfg.Trip != nil {
			b.openUntil = since.Add(cfg.Trip.OpenFor)
		}
	}
	return b
}

// Transition is a change of a breaker's state.
type Transition struct {
	Policy   string
	From, To v1alpha1.BreakerState
	Reason   string
	At       time.Time
}

// Advance moves b to the state that cfg and the clock say, and, when
// distress was judged (judged true), that the judgements say: a breaker
// trips when they have said distressed for forSeconds without a break
// (also while it was open: distress still there when it ramps back opens
// it again at once). A new cfg.ClosedAt is an operator closing it by
// hand: an automatic open ramps back at once, and the distress judged so
// far is forgotten. It returns the transitions made, in order.
func (b *Breaker) Advance(cfg Config, judged, distressed bool, reason string, now time.Time) []Transition {
	var out []Transition
	closedByHand := false
	if !cfg.ClosedAt.Equal(b.closedAt) {
		b.closedAt = cfg.ClosedAt
		if !cfg.ClosedAt.IsZero() {
			// Acted on when this gateway sees it, by its own clock (the
			// CLI's may be off): the close is meant now. The distress
			// must then be judged anew for forSeconds, and a judgement
			// at forSeconds covers only answers after the close (the
			// window is whole seconds), so old distress cannot reopen it.
			closedByHand, b.distressSince = true, time.Time{}
			judged = false // this judgement was of answers before the close
		}
	}
	move := func(to v1alpha1.BreakerState, why string) {
		out = append(out, Transition{From: b.State, To: to, Reason: why, At: now})
		b.State, b.Since, b.Reason = to, now, why
	}
	rampOrClose := func(why string) {
		if cfg.Ramp > 0 {
			move(Ramping, fmt.Sprintf("%s: letting traffic back over %s", why, cfg.Ramp))
		} else {
			move(Closed, why)
		}
	}
	switch {
	case cfg.Open:
		if b.State != Open || !b.byHand {
			b.byHand = true
			move(Open, "opened by hand (spec.breaker.open is true)")
		}
		return out
	case b.State == Open && b.byHand:
		b.byHand = false
		rampOrClose("closed by hand")
	case b.State == Open && closedByHand:
		rampOrClose(fmt.Sprintf("closed by hand (spec.breaker.closedAt) after it %s", b.Reason))
	case b.State == Open && (cfg.Trip == nil || !now.Before(b.openUntil)):
		rampOrClose(fmt.Sprintf("open for its openSeconds after it %s", b.Reason))
	}
	if b.State == Ramping && now.Sub(b.Since) >= cfg.Ramp {
		move(Closed, "ramp done")
	}
	if judged && !distressed {
		b.distressSince = time.Time{}
	}
	if judged && distressed && b.distressSince.IsZero() {
		b.distressSince = now
	}
	held := cfg.Trip != nil && !b.distressSince.IsZero() && now.Sub(b.distressSince) >= time.Duration(cfg.Trip.ForSeconds)*time.Second
	if judged && distressed && held && b.State != Open {
		b.openUntil = now.Add(cfg.Trip.OpenFor)
		move(Open, reason)
	}
	return out
}

// Admits says whether b lets a matched request through at now, draw
// being uniform in [0, 1): none while Open, a share growing linearly
// from none to all while Ramping.
func (b *Breaker) Admits(cfg Config, now time.Time, draw float64) bool {
	switch b.State {
	case Open:
		return false
	case Ramping:
		if cfg.Ramp <= 0 {
			return true
		}
		return draw < float64(now.Sub(b.Since))/float64(cfg.Ramp)
	}
	return true
}

// byHandRetry is the Retry-After base of a breaker opened by hand: no one
// knows when it closes, and a refusal every few seconds costs nothing.
const byHandRetry = 5 * time.Second

// Refusal is the message and the wait for a request b refused.
func (b *Breaker) Refusal(policy string, cfg Config, now time.Time) (msg string, wait time.Duration) {
	since := b.Since.UTC().Format(time.RFC3339)
	closeCmd := fmt.Sprintf("rampart gateway breaker close --policy %s (or kubectl patch trafficpolicy %s --type merge -p '{\"spec\":{\"breaker\":{\"open\":false}}}')", policy, policy)
	switch {
	case b.State == Open && b.byHand:
		return fmt.Sprintf("TrafficPolicy %q has its circuit breaker open, %s since %s: every request it matches is refused. Retry later; an operator closes it with: %s",
			policy, b.Reason, since, closeCmd), byHandRetry
	case b.State == Open:
		return fmt.Sprintf("TrafficPolicy %q has its circuit breaker open since %s: the API servers are in distress (%s). It lets requests back gradually from %s; retry then. It opened by itself and closes by itself once the distress is gone; an operator ends it now with: rampart gateway breaker close --policy %s (to stop it opening by itself, remove spec.breaker.trip: kubectl edit trafficpolicy %s)",
			policy, since, strings.TrimPrefix(b.Reason, trippedPrefix), b.openUntil.UTC().Format(time.RFC3339), policy, policy), b.openUntil.Sub(now)
	}
	share := 100 * float64(now.Sub(b.Since)) / float64(max(cfg.Ramp, 1))
	return fmt.Sprintf("TrafficPolicy %q is letting requests back gradually after its circuit breaker was open (%.0f%% admitted now, all from %s): this one was not. Retry shortly",
		policy, min(share, 100), b.Since.Add(cfg.Ramp).UTC().Format(time.RFC3339)), time.Second
}
