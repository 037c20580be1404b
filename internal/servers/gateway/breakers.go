package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/breaker"
	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// breakerTick is how often the window is judged and open breakers are
// moved on by the clock even when no request comes.
const breakerTick = 250 * time.Millisecond

// breakers is the shell around breaker.Set: it judges the window on a
// ticker, and logs, counts and writes to status.breakers every
// transition.
type breakers struct {
	g           *Gateway
	set         *breaker.Set
	transitions *prometheus.CounterVec
	state       *prometheus.GaugeVec

	mu       sync.Mutex
	pending  map[string]*breaker.Transition // latest per policy not yet written; nil: remove our entry
	reported map[string]bool                // policies whose status has our entry
	kick     chan struct{}
}

func newBreakers(g *Gateway) *breakers {
	b := &breakers{
		g:   g,
		set: breaker.NewSet(),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rampart_gateway_breaker_transitions_total",
			Help: "Circuit breaker transitions by TrafficPolicy and the state entered (Open, Ramping, Closed).",
		}, []string{"policy", "to"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rampart_gateway_breaker_state",
			Help: "1 for the state each TrafficPolicy's circuit breaker is in (Closed, Open, Ramping), 0 for the others.",
		}, []string{"policy", "state"}),
		pending:  map[string]*breaker.Transition{},
		reported: map[string]bool{},
		kick:     make(chan struct{}, 1),
	}
	g.metrics.registry.MustRegister(b.transitions, b.state)
	return b
}

// decide asks p's breaker about a request p matched.
func (b *breakers) decide(p *traffic.Policy, now time.Time) verdict.Verdict {
	d, ts := b.set.Decide(p.Name, breaker.ConfigOf(p.Spec.Breaker), now, jitter())
	b.report(ts)
	return d
}

// resume goes on, after a restart, with the breakers this replica
// reported in the TrafficPolicies objs (its own entry of
// status.breakers, by its name): a breaker that tripped stays open for
// the rest of its openSeconds instead of letting every request through.
func (b *breakers) resume(objs []any, now time.Time) {
	for _, obj := range objs {
		tp, err := decodePolicy(obj)
		if err != nil || tp.Spec.Action != v1alpha1.ActionLimit || tp.Spec.Breaker == nil {
			continue // an undecodable policy is logged by the reload
		}
		for _, st := range tp.Status.Breakers {
			if st.Gateway != b.g.opts.Name {
				continue
			}
			ts := b.set.Resume(tp.Name, breaker.ConfigOf(tp.Spec.Breaker), st, now)
			if len(ts) > 0 && ts[0].To != breaker.Closed {
				b.g.log.Info("breaker resumed from status", "policy", tp.Name, "state", ts[0].To, "since", ts[0].At, "reason", ts[0].Reason)
			}
			b.report(ts)
		}
	}
}

// record notes an answer of the API servers.
func (b *breakers) record(now time.Time, code int, latency time.Duration, longRunning bool) {
	b.set.Window.Record(now, code, latency, longRunning)
}

// run judges the window until ctx ends, and writes status.
func (b *breakers) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { b.writeStatus(ctx) })
	t := time.NewTicker(breakerTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			b.tick(now)
		}
	}
}

func (b *breakers) tick(now time.Time) {
	var ps []breaker.Configured
	names := map[string]bool{}
	for _, p := range *b.g.policies.Load() {
		names[p.Name] = true
		if p.Spec.Action == v1alpha1.ActionLimit && p.Spec.Breaker != nil {
			ps = append(ps, breaker.Configured{Policy: p.Name, Config: breaker.ConfigOf(p.Spec.Breaker)})
		}
	}
	b.report(b.set.Tick(ps, now))
	// A policy that lost its breaker loses our status entry; a deleted
	// policy, its series.
	b.mu.Lock()
	defer b.mu.Unlock()
	for name := range b.reported {
		if _, ok := b.set.Snapshot(name); ok {
			continue
		}
		b.state.DeletePartialMatch(prometheus.Labels{"policy": name})
		delete(b.reported, name)
		if names[name] {
			b.pending[name] = nil
			b.signal()
		}
	}
}

// report logs, counts and queues for status each transition.
func (b *breakers) report(ts []breaker.Transition) {
	if len(ts) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range ts {
		if t.From != "" { // a new breaker is no transition, only a state to show
			b.g.log.Info("breaker transition", "policy", t.Policy, "from", t.From, "to", t.To, "reason", t.Reason)
			b.transitions.WithLabelValues(t.Policy, string(t.To)).Inc()
		}
		for _, s := range []v1alpha1.BreakerState{breaker.Closed, breaker.Open, breaker.Ramping} {
			v := 0.0
			if s == t.To {
				v = 1
			}
			b.state.WithLabelValues(t.Policy, string(s)).Set(v)
		}
		b.pending[t.Policy] = &t
		b.reported[t.Policy] = true
	}
	b.signal()
}

func (b *breakers) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// writeStatus writes the latest state of each breaker to its policy's
// status.breakers, apart from the requests: a slow API server delays the
// status, never a request, and a burst of transitions is one write per
// policy. Each replica applies its own entry with a field manager of its
// own, so replicas never overwrite each other's.
func (b *breakers) writeStatus(ctx context.Context) {
	dyn, err := dynamic.NewForConfig(b.g.restCfg)
	if err != nil {
		b.g.log.Error("breaker status will not be written", "err", err.Error())
		return
	}
	res := dyn.Resource(TrafficPolicies)
	manager := "rampart-gateway/" + b.g.opts.Name
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		}
		b.mu.Lock()
		batch := b.pending
		b.pending = map[string]*breaker.Transition{}
		b.mu.Unlock()
		failed := false
		for policy, t := range batch {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "rampart.io/v1alpha1", "kind": "TrafficPolicy",
				"metadata": map[string]any{"name": policy},
			}}
			if t != nil {
				u.Object["status"] = map[string]any{"breakers": []any{map[string]any{
					"gateway": b.g.opts.Name, "state": string(t.To), "reason": t.Reason,
					"since": t.At.UTC().Format(time.RFC3339),
				}}}
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := res.ApplyStatus(wctx, policy, u, metav1.ApplyOptions{FieldManager: manager, Force: true})
			cancel()
			if apierrors.IsNotFound(err) {
				continue // the policy is gone, and its status with it
			}
			if err != nil && ctx.Err() == nil {
				b.g.log.Warn("breaker status not written; retrying", "policy", policy, "err", err.Error())
				failed = true
				b.mu.Lock()
				if _, newer := b.pending[policy]; !newer {
					b.pending[policy] = t
				}
				b.mu.Unlock()
			}
		}
		if failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			b.signal()
		}
	}
}
