package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// listStormRouted is list-storm where the storm's LISTs are admitted, not
// refused: some heavy listers are legitimate (a reporting job, an
// inventory export) and must be served, only not at everyone else's
// expense. The cluster has three API servers. Unprotected, the storm's 24
// clients spread over all three, as a load balancer in front of them
// spreads connections, and the business client shares the first with
// eight of them. Protected, every client goes through the gateway, and a
// TrafficPolicy with action Route sends the storm's LISTs of pods to the
// gateway's pool heavy (the third API server) while the business stays on
// the default pool (the other two).
var listStormRouted = Drill{
	Name: "list-storm-routed",
	Incident: "the list-storm on three API servers with its LISTs admitted, not refused: 24 clients LIST every pod of a 10,000-pod cluster in a loop; " +
		"unprotected they spread over the three API servers, protected a Route TrafficPolicy sends them to a pool of one",
	Run: runListStormRouted,
}

const (
	// routedAPIServers is the drill's cluster: two API servers in the
	// gateway's default pool and one in pool heavy.
	routedAPIServers = 3
	// routedPool is the pool the storm is routed to.
	routedPool = "heavy"
	// memoryRiseBound is how much the memory of the API servers the storm
	// was routed away from may rise, in percent of their calm memory.
	memoryRiseBound = 10
)

// runListStormRouted: the loss is the business requests that failed or
// took longer than businessSlow, bound 1% (a p99 under 1 s); Measured also
// holds each side's memory rise of the API servers other than the one the
// storm is routed to (protected: the default pool), whose bound is
// memoryRiseBound percent.
func runListStormRouted(ctx context.Context, t Target) (loss Loss, err error) {
	if t.Local == nil || t.Local.GatewayURL() == "" {
		return Loss{}, errors.New("list-storm-routed needs the local clusters `rampart drill` starts, with a gateway (it adds API servers, gives the gateway a pool and reads the API servers' memory): run without --kubeconfig")
	}
	undo, err := t.routedTopology(ctx)
	defer func() {
		// The drills after this one need the cluster as it was.
		if uerr := undo(); uerr != nil && err == nil {
			err = fmt.Errorf("putting the cluster back: %w", uerr)
		}
	}()
	if err != nil {
		return Loss{}, err
	}
	return t.stormRouted(ctx)
}

// routedTopology gives the cluster routedAPIServers API servers and, on
// the protected side, the gateway pool heavy of the last one; undo puts
// the cluster back as it was.
func (t Target) routedTopology(ctx context.Context) (undo func() error, err error) {
	c := t.Local
	var steps []func() error
	undo = func() error {
		var errs []error
		for i := len(steps) - 1; i >= 0; i-- {
			errs = append(errs, steps[i]())
		}
		return errors.Join(errs...)
	}
	if n := len(c.APIServerURLs()); n < routedAPIServers {
		added := routedAPIServers - n
		err := c.AddAPIServers(ctx, added)
		steps = append(steps, func() error { return c.RemoveAPIServers(added) })
		if err != nil {
			return undo, fmt.Errorf("adding %d API servers: %w", added, err)
		}
	}
	if !t.Protected {
		return undo, nil
	}
	_, was := c.GatewayPools()
	if len(was) == 1 && was[0].Name == routedPool && len(was[0].URLs) == 1 {
		return undo, nil
	}
	var before []localcluster.GatewayPool
	for _, p := range was {
		before = append(before, localcluster.GatewayPool{Name: p.Name, Servers: len(p.URLs)})
	}
	err = c.SetGatewayPools(ctx, []localcluster.GatewayPool{{Name: routedPool, Servers: 1}})
	steps = append(steps, func() error { return c.SetGatewayPools(context.Background(), before) })
	return undo, err
}

// stormRouted runs the storm on the cluster routedTopology made.
func (t Target) stormRouted(ctx context.Context) (Loss, error) {
	ns, group := t.Prefix+"-list-storm-routed", t.Prefix+":list-storm"
	pods, stormLasts, calmFor := stormSize(t.Scale, true)
	done, err := t.stormSetup(ctx, ns, group, pods)
	defer done()
	if err != nil {
		return Loss{}, err
	}
	urls := t.Local.APIServerURLs()
	heavy := len(urls) - 1 // the API server the storm is routed to, protected
	stormHost := func(i int) string { return urls[i%len(urls)] }
	businessHost := urls[0]
	policy := t.Prefix + "-storm-to-" + routedPool
	if t.Protected {
		stormHost = func(int) string { return t.Local.GatewayURL() }
		businessHost = t.Local.GatewayURL()
		undo, err := t.routeStorm(ctx, policy, group)
		if err != nil {
			return Loss{}, err
		}
		defer undo()
	}
	business, err := clientIssuer(t.Local, businessHost, group)(t.Prefix + "-business")
	if err != nil {
		return Loss{}, err
	}
	biz, err := newBusinessClient(ctx, business, ns)
	if err != nil {
		return Loss{}, err
	}
	pids := make([]int, len(urls))
	for i := range urls {
		pids[i] = t.Local.PID(localcluster.APIServerName(i))
	}
	routedBefore := routedLists(t.Local, policy)

	calm := biz.run(ctx, calmFor)
	calmRSS := make([]int64, len(pids))
	for i, pid := range pids {
		calmRSS[i] = rssBytes(pid)
	}

	storm, err := startStorm(ctx, func(i int) (*rest.Config, error) {
		return clientIssuer(t.Local, stormHost(i), group)(fmt.Sprintf("%s-storm-%d", t.Prefix, i))
	}, pids...)
	if err != nil {
		return Loss{}, err
	}
	during := biz.run(ctx, stormLasts)
	peakRSS := storm.stop()

	// The API servers other than the routed-to one: their largest rise.
	var otherRise, otherCalm, otherPeak float64
	for i := range pids {
		if i == heavy || calmRSS[i] == 0 {
			continue
		}
		if rise := 100 * float64(peakRSS[i]-calmRSS[i]) / float64(calmRSS[i]); rise >= otherRise {
			otherRise, otherCalm, otherPeak = rise, mib(calmRSS[i]), mib(peakRSS[i])
		}
	}
	measured := map[string]float64{
		"other_apiservers_rss_rise_percent":   round1(otherRise),
		"other_apiserver_calm_rss_mib":        round1(otherCalm),
		"other_apiserver_peak_rss_mib":        round1(otherPeak),
		"routed_apiserver_calm_rss_mib":       round1(mib(calmRSS[heavy])),
		"routed_apiserver_peak_rss_mib":       round1(mib(peakRSS[heavy])),
		"other_apiservers_rss_rise_bound_pct": memoryRiseBound,
		"apiservers":                          float64(len(urls)),
	}
	if t.Protected {
		measured["storm_lists_routed"] = routedLists(t.Local, policy) - routedBefore
	}
	return stormLoss(calm, during, storm, pods, stormLasts, measured), nil
}

// routeStorm creates the TrafficPolicy that sends the storm's LISTs of
// pods to pool heavy, through the gateway, so that it applies to the
// storm's first LIST (the gateway answers a policy write once it applies
// it); undo deletes it.
func (t Target) routeStorm(ctx context.Context, name, group string) (undo func(), err error) {
	undo = func() {}
	cfg, err := clientcmd.BuildConfigFromFlags("", t.Local.GatewayKubeconfig())
	if err != nil {
		return undo, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return undo, err
	}
	tp := &v1alpha1.TrafficPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrafficPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TrafficPolicySpec{
			// Ahead of the default policies (100 and up).
			Precedence: 50,
			Match: []v1alpha1.TrafficMatch{{
				Subjects:  v1alpha1.Subjects{Groups: []string{group}},
				Verbs:     []string{"list"},
				Resources: []v1alpha1.TrafficResourceRule{{APIGroups: []string{""}, Resources: []string{"pods"}}},
			}},
			Action: v1alpha1.ActionRoute,
			Route:  &v1alpha1.TrafficRoute{Pool: routedPool, OnUnavailable: v1alpha1.RouteReject},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tp)
	if err != nil {
		return undo, err
	}
	res := dyn.Resource(gateway.TrafficPolicies)
	if _, err := res.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return undo, fmt.Errorf("the Route TrafficPolicy: %w", err)
	}
	return func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) }, nil
}

// routedLists is the gateway's count of requests policy routed to pool
// heavy; 0 if it cannot be read.
func routedLists(c *localcluster.Cluster, policy string) float64 {
	resp, err := http.Get(c.GatewayMetricsURL())
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^rampart_gateway_routed_requests_total\{outcome="routed",policy="` + regexp.QuoteMeta(policy) + `",pool="` + routedPool + `"\} ([0-9.e+]+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
