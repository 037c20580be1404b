package gateway

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
)

// observer sees each request once it has ended, refused or answered: who
// sent it, what the guards decided (x.policy, x.refused) and what the
// answer held (x.resp). Observers decide nothing; they count and record,
// cheaply, and never block.
type observer func(x *exchange, end time.Time)

// observers are what the gateway runs when a request ends.
func (g *Gateway) observers() []observer {
	obs := []observer{g.measureAnswer}
	if g.traffic != nil {
		obs = append(obs, g.logTraffic)
	}
	return obs
}

// finish ends a request: what the guards hold is given back, then the
// observers see it.
func (g *Gateway) finish(x *exchange) {
	x.end()
	x.resp.objects.End()
	end := time.Now()
	for _, o := range g.observe {
		o(x, end)
	}
}

// measureAnswer counts the bytes of the answer and the objects of LISTs
// and watches, by policy and resource; like the request counters, only
// for requests that reached a policy's selection.
func (g *Gateway) measureAnswer(x *exchange, _ time.Time) {
	if !x.selected {
		return
	}
	_, resource := g.metrics.labels(x.req, x.resp.code)
	k := [2]string{x.policyName, resource}
	if x.resp.bytes > 0 {
		g.metrics.responseBytesOf.get(k).Add(float64(x.resp.bytes))
	}
	if n := x.resp.objectsSent(); n >= 0 {
		switch x.resp.count {
		case countList:
			g.metrics.listObjectsOf.get(k).Observe(float64(n))
		case countWatch:
			g.metrics.watchEventsOf.get(k).Add(float64(n))
		}
	}
}

// Traffic log sampling (Options.TrafficLogSample).
const (
	// SampleAll logs every request.
	SampleAll = "all"
	// SamplePolicy logs as the access log samples: a policy's
	// accessLogPercent of its requests, AccessLogPercent of the rest.
	SamplePolicy = "policy"
)

// logTraffic writes the request's line to the traffic log, if sampled.
// Nothing of the request's or the answer's body goes in, nor any header
// but the user agent.
func (g *Gateway) logTraffic(x *exchange, end time.Time) {
	every := 1
	if g.opts.TrafficLogSample == SamplePolicy {
		percent := g.opts.AccessLogPercent
		if x.selected {
			percent = x.sample
		}
		if percent <= 0 || percent < 100 && jitter()*100 >= float64(percent) {
			return
		}
		every = int(math.Round(100 / float64(min(percent, 100))))
	}
	rec := trafficlog.Record{
		Time:          x.start.UTC(),
		User:          x.user.Name,
		Groups:        x.user.Groups,
		UserAgent:     x.r.UserAgent(),
		Verb:          x.req.Verb,
		Code:          x.resp.code,
		LatencyMillis: float64(end.Sub(x.start).Microseconds()) / 1000,
		ResponseBytes: x.resp.bytes,
		Policy:        x.policyName,
		Verdict:       trafficlog.VerdictAdmitted,
		SampleEvery:   every,
	}
	if !x.selected || x.policy == nil {
		rec.Policy = ""
	}
	if x.as.Name != x.user.Name {
		rec.Impersonated = x.as.Name
	}
	if x.pool != nil && x.pool != g.pools.Default() {
		rec.Pool = x.pool.Name
	}
	if r := x.req; r.IsResource {
		rec.APIGroup, rec.APIVersion, rec.Resource, rec.Subresource, rec.Namespace, rec.Name = r.APIGroup, r.Version, r.Resource, r.Subresource, r.Namespace, r.Name
	} else {
		rec.Path = x.r.URL.Path
	}
	if n := x.resp.objectsSent(); n >= 0 {
		switch x.resp.count {
		case countList:
			rec.Objects = &n
		case countWatch:
			rec.WatchEvents = n
		}
	}
	switch {
	case x.refused != nil:
		// rec.Code is the refusal's: refuse wrote it through x.resp.
		rec.Verdict, rec.Reason = trafficlog.VerdictRefused, x.refused.Reason
		if rec.Reason == "" {
			rec.Reason = strings.ToLower(strings.ReplaceAll(http.StatusText(rec.Code), " ", "-"))
		}
	case x.policy != nil && x.policy.Spec.Action == v1alpha1.ActionExempt:
		rec.Verdict = trafficlog.VerdictExempt
	}
	g.traffic.Write(&rec)
}
