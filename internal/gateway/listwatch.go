package gateway

import (
	"time"

	"github.com/rampart-io/rampart/internal/gateway/traffic"
)

// guardListWatch applies policy p's list and watch guards to req, after
// its limit has admitted it: a LIST is priced by the objects it will
// return, a watch counted against its client's open watches and the
// rates of new ones. An admitted request must call Done when it ends.
func (g *Gateway) guardListWatch(p *traffic.Policy, req traffic.Request, now time.Time) traffic.Verdict {
	switch {
	case req.Verb == "list" && p.Spec.List != nil:
		return g.guards.AdmitList(p, req, g.counts.For(req), now)
	case req.Verb == "watch" && p.Spec.Watch != nil:
		return g.guards.AdmitWatch(p, req, now)
	}
	return traffic.Verdict{Admitted: true}
}
