package gateway

import (
	"time"

	"github.com/rampart-io/rampart/internal/gateway/traffic"
)

// guardListWatch applies policy p's list and watch guards to req, after
// its limit has admitted it: a LIST, or a watch that starts by streaming
// every object (an informer's watch-list), is priced by the objects it
// will return; a watch is counted against its client's open watches and
// the rates of new ones. An admitted request must call Done when it ends.
func (g *Gateway) guardListWatch(p *traffic.Policy, req traffic.Request, now time.Time) traffic.Verdict {
	if p.Spec.List == nil && p.Spec.Watch == nil {
		return traffic.Verdict{Admitted: true}
	}
	var counts traffic.ObjectCounts
	// Only a priced request consults (and so starts or keeps alive) the
	// per-namespace count of its resource.
	if p.Spec.List != nil && (req.Verb == "list" || req.InitialEvents()) {
		counts = g.counts.For(req, now)
	}
	return g.guards.Decide(p, req, counts, now)
}
