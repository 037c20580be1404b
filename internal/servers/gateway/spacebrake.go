package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection/spacebrake"
	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// The etcd-space brake: the gateway watches the ConfigMap in which the
// manager's leader publishes its look at etcd's space (space.Report), and
// while the fullest member is at or past --etcd-space-brake-share of its
// quota, or NOSPACE is raised, refuses creates from clients outside the
// control plane (package spacebrake decides). The watch names the one
// ConfigMap (fieldSelector metadata.name), so that the gateway's Role
// grants get, list and watch on it alone (SpaceRole).

// spaceBrake is the gateway's reading of the report.
type spaceBrake struct {
	reading atomic.Pointer[spacebrake.Reading]
	// fence holds the answer to a write of the report through the
	// gateway until the watch has read it (policyfence.go).
	fence    *policyFence
	refusals *prometheus.CounterVec
}

func newSpaceBrake() *spaceBrake {
	b := &spaceBrake{fence: newPolicyFence(space.ReportConfigMap)}
	b.reading.Store(&spacebrake.Reading{})
	b.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_gateway_etcd_space_brake_refusals_total",
		Help: "Creates the etcd-space brake refused (etcd at or past --etcd-space-brake-share of its quota, or NOSPACE), by resource; they count in rampart_gateway_rejections_total{reason=\"etcd-space\"} too.",
	}, []string{"resource"})
	return b
}

// brakeWanted says whether the gateway was asked for the brake: a
// namespace to read the report in, and a share.
func (g *Gateway) brakeWanted() bool {
	return g.opts.Namespace != "" && g.opts.EtcdSpaceBrakeShare > 0
}

// spaceState is the brake's state at now.
func (g *Gateway) spaceState(now time.Time) spacebrake.State {
	share := g.opts.EtcdSpaceBrakeShare
	if !g.brakeWanted() {
		share = 0
	}
	return spacebrake.Assess(*g.space.reading.Load(), share, now)
}

// brakeSpace refuses creates from clients outside the control plane while
// etcd is nearly full (spacebrake.Decide). It judges whom the request
// acts as, which is whom the API server authorizes.
func (g *Gateway) brakeSpace(x *exchange) verdict.Verdict {
	if x.req.Verb != "create" {
		return pass
	}
	st := g.spaceState(x.start)
	if !st.On {
		return pass
	}
	r := spacebrake.Request{
		Verb: x.req.Verb, APIGroup: x.req.APIGroup, Resource: x.req.Resource, Subresource: x.req.Subresource,
		Namespace: x.req.Namespace, DryRun: x.r.URL.Query().Has("dryRun"),
		User: x.as.Name, Groups: x.as.Groups,
	}
	v := spacebrake.Decide(st, r, g.opts.Namespace, g.opts.EtcdSpaceBrakeExemptUsers)
	if !v.Allowed {
		_, resource := g.metrics.labels(x.req, 0)
		g.space.refusals.WithLabelValues(resource).Inc()
	}
	return v
}

// watchSpace keeps the brake's reading equal to the ConfigMap. It does not
// hold the gateway's start: until the ConfigMap is read, the brake is
// open (spacebrake.Unsynced).
func (g *Gateway) watchSpace(ctx context.Context, wg *sync.WaitGroup) error {
	if !g.brakeWanted() {
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(g.client, 10*time.Minute, informers.WithNamespace(g.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + space.ReportConfigMap }))
	informer := factory.Core().V1().ConfigMaps().Informer()
	key := g.opts.Namespace + "/" + space.ReportConfigMap
	reload := func() {
		r := spacebrake.Reading{Synced: informer.HasSynced()}
		if obj, ok, _ := informer.GetStore().GetByKey(key); ok {
			r.Report, r.Err = readSpaceReport(obj.(*corev1.ConfigMap))
		}
		g.space.reading.Store(&r)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { reload(); g.space.fence.apply(obj) },
		UpdateFunc: func(_, obj any) { reload(); g.space.fence.apply(obj) },
		DeleteFunc: func(obj any) { reload(); g.space.fence.apply(obj) },
	}); err != nil {
		return err
	}
	wg.Go(func() { informer.Run(ctx.Done()) })
	wg.Go(func() {
		// An absent ConfigMap brings no event: the reading says synced
		// once the first list has come.
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			reload()
		}
	})
	return nil
}

// readSpaceReport is the report a ConfigMap holds: nil without one.
func readSpaceReport(cm *corev1.ConfigMap) (*space.Report, error) {
	raw, ok := cm.Data[space.ReportKey]
	if !ok {
		return nil, nil
	}
	var r space.Report
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// spaceReportWrite says whether r may write the report's ConfigMap: a
// create names no object in its path, so any ConfigMap create in the
// namespace may be one (the fence checks the answer's name).
func (g *Gateway) spaceReportWrite(r traffic.Request) bool {
	if !g.brakeWanted() || !r.IsResource || r.APIGroup != "" || r.Resource != "configmaps" || r.Subresource != "" || r.Namespace != g.opts.Namespace {
		return false
	}
	switch r.Verb {
	case "create":
		return true
	case "update", "patch", "delete":
		return r.Name == space.ReportConfigMap
	}
	return false
}

var (
	brakeDesc = prometheus.NewDesc("rampart_gateway_etcd_space_brake",
		"1 while the etcd-space brake refuses creates from clients outside the control plane: the manager's last look says the fullest etcd member is at or past --etcd-space-brake-share of its quota, or NOSPACE is raised.", nil, nil)
	brakeOpenDesc = prometheus.NewDesc("rampart_gateway_etcd_space_brake_failing_open",
		"1, by reason, while the etcd-space brake cannot read a usable report and so lets every create through: unsynced (the ConfigMap not read yet, or the gateway may not), absent (no ConfigMap rampart-etcd-space or no report in it: is the manager run with --etcd-space-secret?), unreadable, unmeasured (the manager could not look at etcd), stale (older than 3 of the manager's --etcd-space-every).", []string{"reason"}, nil)
)

// brakeCollector reports the brake as it is at scrape time: the report
// goes stale with time alone.
type brakeCollector struct{ g *Gateway }

func (c brakeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- brakeDesc
	ch <- brakeOpenDesc
}

func (c brakeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.spaceState(time.Now())
	ch <- prometheus.MustNewConstMetric(brakeDesc, prometheus.GaugeValue, b2f(st.On))
	for _, reason := range spacebrake.Opens {
		ch <- prometheus.MustNewConstMetric(brakeOpenDesc, prometheus.GaugeValue, b2f(st.Open == reason), string(reason))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
