package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// TrafficPolicies is the resource the gateway watches.
var TrafficPolicies = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "trafficpolicies"}

// policySyncTimeout bounds how long the gateway waits for the policies
// before serving; without the CRD it serves with none and says so.
const policySyncTimeout = 30 * time.Second

// watchPolicies keeps g.policies equal to the TrafficPolicies in the
// cluster: every change is applied to the next request, without restart.
func (g *Gateway) watchPolicies(ctx context.Context, wg *sync.WaitGroup) error {
	dyn, err := dynamic.NewForConfig(g.restCfg)
	if err != nil {
		return err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 10*time.Minute)
	informer := factory.ForResource(TrafficPolicies).Informer()
	leftOut := &leftOutPolicies{g: g, logged: map[string]int64{}}
	reload := func() {
		var ps []traffic.Policy
		for _, obj := range informer.GetStore().List() {
			p, err := toPolicy(obj)
			if err != nil {
				g.log.Error("TrafficPolicy ignored", "err", err.Error())
				continue
			}
			ps = append(ps, p)
		}
		traffic.Sort(ps)
		ps, unknown := traffic.WithKnownPools(ps, func(name string) bool { return g.pools.Named(name) != nil })
		leftOut.report(unknown)
		g.policies.Store(&ps)
		g.limiter.Forget(ps)
		g.listWatch.Forget(ps)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { reload(); g.policyFence.apply(obj) },
		UpdateFunc: func(_, obj any) { reload(); g.policyFence.apply(obj) },
		DeleteFunc: func(obj any) { reload(); g.policyFence.apply(obj) },
	}); err != nil {
		return err
	}
	wg.Go(func() { informer.Run(ctx.Done()) })
	syncCtx, cancel := context.WithTimeout(ctx, policySyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.log.Error("TrafficPolicies not loaded: serving without policies until they are. Is the CRD installed (rampart.io_trafficpolicies.yaml) and may the gateway list them (ClusterRole rampart-gateway)?")
		wg.Go(func() {
			if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
				g.breakers.resume(informer.GetStore().List(), time.Now())
				reload()
				g.synced.Store(true)
			}
		})
		return nil
	}
	// Before any policy applies, so that no request meets a breaker
	// that has not resumed.
	g.breakers.resume(informer.GetStore().List(), time.Now())
	reload()
	g.synced.Store(true)
	return nil
}

// leftOutPolicies reports the Route policies naming a pool this gateway
// lacks: a log line once per generation, and
// rampart_gateway_policies_left_out while they are left out.
type leftOutPolicies struct {
	g  *Gateway
	mu sync.Mutex
	// logged is the generation of each policy last logged.
	logged map[string]int64
}

func (l *leftOutPolicies) report(unknown []traffic.Policy) {
	g := l.g
	l.mu.Lock()
	defer l.mu.Unlock()
	g.metrics.leftOut.Reset()
	now := map[string]bool{}
	for _, p := range unknown {
		now[p.Name] = true
		g.metrics.leftOut.WithLabelValues(p.Name, "unknown-pool").Set(1)
		if gen, ok := l.logged[p.Name]; ok && gen == p.Generation {
			continue
		}
		l.logged[p.Name] = p.Generation
		var pools []string
		for _, pool := range g.pools {
			pools = append(pools, pool.Name)
		}
		g.log.Error("TrafficPolicy left out: it routes to a pool this gateway does not have; its requests are judged by the next policy that matches them",
			"policy", p.Name, "pool", p.Spec.Route.Pool, "pools", pools,
			"fix", "give the gateway --upstream-pool "+p.Spec.Route.Pool+"=URL,... (the chart's gateway.upstreamPools) or correct spec.route.pool")
	}
	for name := range l.logged {
		if !now[name] {
			delete(l.logged, name)
		}
	}
}

func toPolicy(obj any) (traffic.Policy, error) {
	tp, err := decodePolicy(obj)
	if err != nil {
		return traffic.Policy{}, err
	}
	return traffic.Policy{Name: tp.Name, Generation: tp.Generation, Spec: tp.Spec}, nil
}

// decodePolicy is a TrafficPolicy of the informer's cache, status included.
func decodePolicy(obj any) (*v1alpha1.TrafficPolicy, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in the TrafficPolicy cache", obj)
	}
	var tp v1alpha1.TrafficPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &tp); err != nil {
		return nil, fmt.Errorf("TrafficPolicy %s: %w", u.GetName(), err)
	}
	return &tp, nil
}
