package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/protection/traffic"
)

func TestIdleCounts(t *testing.T) {
	t0 := time.Unix(10000, 0)
	idleAfter := 10 * time.Minute
	gr := func(r string) schema.GroupResource { return schema.GroupResource{Resource: r} }
	resources := map[schema.GroupResource]*namespaceCounts{
		gr("configmaps"): {lastUsed: t0.Add(-11 * time.Minute)},
		gr("secrets"):    {lastUsed: t0.Add(-9 * time.Minute)},
		gr("events"):     {lastUsed: t0.Add(-10 * time.Minute)},
		// Counted from the start (--count-resources), never stopped,
		// even never used.
		gr("pods"): {eager: true},
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		want []string
	}{
		{"unused for 11 and exactly 10 minutes", t0, []string{"configmaps", "events"}},
		{"a minute later secrets too", t0.Add(time.Minute), []string{"configmaps", "events", "secrets"}},
		{"all recently used", t0.Add(-9 * time.Minute), nil},
	} {
		var got []string
		for _, g := range idleCounts(resources, tc.now, idleAfter) {
			got = append(got, g.Resource)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: idle %v, want %v", tc.name, got, tc.want)
		}
	}
}

// At the cap a resource is not counted per namespace: each such request
// is counted in a metric and the first is logged; once an idle count
// stops, the next request of the resource starts counting it.
func TestCountCapIsExplicit(t *testing.T) {
	var log bytes.Buffer
	// No API server: the informer started at the end just retries until
	// the test ends.
	c, err := newObjectCounts(&rest.Config{Host: "https://127.0.0.1:1"}, nil, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.ctx = ctx
	t0 := time.Unix(10000, 0)
	synced := func() bool { return true }
	for i := range maxCountedResources {
		c.resources[schema.GroupResource{Resource: fmt.Sprint("r", i)}] = &namespaceCounts{perNS: map[string]int64{}, synced: synced, lastUsed: t0, stop: func() {}}
	}
	c.resources[schema.GroupResource{Resource: "r0"}].lastUsed = t0.Add(-defaultCountIdleAfter)
	c.cluster[schema.GroupResource{Resource: "configmaps"}] = 5000
	list := traffic.Request{Verb: "list", Version: "v1", Resource: "configmaps", Namespace: "big"}
	for range 3 {
		got := c.For(list, t0)
		if want := (traffic.ObjectCounts{Cluster: 5000, ClusterKnown: true}); got != want {
			t.Fatalf("at the cap: %+v, want the cluster's count alone %+v", got, want)
		}
	}
	if n := counterValue(t, c); n != 3 {
		t.Errorf("rampart_gateway_uncounted_lists_total = %v, want 3", n)
	}
	if n := strings.Count(log.String(), "at most this many resources"); n != 1 {
		t.Errorf("the cap logged %d times, want once:\n%s", n, log.String())
	}
	c.stopIdle(t0)
	if _, ok := c.resources[schema.GroupResource{Resource: "r0"}]; ok || len(c.resources) != maxCountedResources-1 {
		t.Fatalf("after r0 was idle for %v: %d counted, r0 still there: %v", defaultCountIdleAfter, len(c.resources), ok)
	}
	c.For(list, t0)
	if _, ok := c.resources[schema.GroupResource{Resource: "configmaps"}]; !ok {
		t.Error("configmaps not counted once a place under the cap was free")
	}
	if n := counterValue(t, c); n != 3 {
		t.Errorf("rampart_gateway_uncounted_lists_total = %v after a place freed, want still 3", n)
	}
}

func counterValue(t *testing.T, c *objectCounts) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.uncounted.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Secrets and custom resources outside the configured groups are never
// counted per namespace: priced by the cluster-wide count like a resource
// at the cap, counted in rampart_gateway_uncounted_lists_total, logged once.
func TestUncountableResourcesArePricedByTheCluster(t *testing.T) {
	var log bytes.Buffer
	c, err := newObjectCounts(&rest.Config{Host: "https://127.0.0.1:1"}, nil, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.ctx = ctx
	c.customGroups = map[string]bool{"counted.example.com": true}
	c.cluster[schema.GroupResource{Resource: "secrets"}] = 7000
	c.cluster[schema.GroupResource{Group: "other.example.com", Resource: "widgets"}] = 300
	t0 := time.Unix(10000, 0)
	for _, r := range []traffic.Request{
		{Verb: "list", Version: "v1", Resource: "secrets", Namespace: "small"},
		{Verb: "list", APIGroup: "other.example.com", Version: "v1", Resource: "widgets", Namespace: "small"},
	} {
		for range 2 {
			got := c.For(r, t0)
			if !got.ClusterKnown || got.NamespaceKnown || got.Cluster != c.cluster[schema.GroupResource{Group: r.APIGroup, Resource: r.Resource}] {
				t.Errorf("%s: %+v, want the cluster's count alone", r.Resource, got)
			}
		}
	}
	if len(c.resources) != 0 {
		t.Errorf("counting %v, want nothing", c.resources)
	}
	if n := counterValue(t, c); n != 4 {
		t.Errorf("rampart_gateway_uncounted_lists_total = %v, want 4", n)
	}
	for _, res := range []string{"secrets", "widgets.other.example.com"} {
		if n := strings.Count(log.String(), "resource="+res); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", res, n, log.String())
		}
	}
}

// A resource the API server says the gateway may not list is not counted,
// and not asked about again.
func TestCountAsksTheAPIServerFirst(t *testing.T) {
	c, err := newObjectCounts(&rest.Config{Host: "https://127.0.0.1:1"}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.ctx = ctx
	asked := make(chan schema.GroupVersionResource, 4)
	c.mayCount = func(_ context.Context, gvr schema.GroupVersionResource) (bool, error) {
		asked <- gvr
		return false, nil
	}
	c.cluster[schema.GroupResource{Resource: "configmaps"}] = 50
	list := traffic.Request{Verb: "list", Version: "v1", Resource: "configmaps", Namespace: "ns"}
	c.For(list, time.Unix(10000, 0))
	<-asked
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		_, denied := c.uncountable[schema.GroupResource{Resource: "configmaps"}]
		n := len(c.resources)
		c.mu.Unlock()
		if denied && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("configmaps not marked uncountable after a denied review (counting %d resources)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := c.For(list, time.Unix(10001, 0)); got.NamespaceKnown || got.Cluster != 50 {
		t.Errorf("after a denied review: %+v, want the cluster's count alone", got)
	}
	select {
	case gvr := <-asked:
		t.Errorf("asked again about %v", gvr)
	default:
	}
}
