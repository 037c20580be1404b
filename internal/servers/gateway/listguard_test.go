package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// waitCounted waits until the gateway at base counts ns's ConfigMaps per
// namespace (want of them): a probe user under a policy refusing
// unpaginated LISTs of more than one object is refused naming the count.
// Policies applied before the probe's are in force once it is.
func waitCounted(t *testing.T, env *clustertest.Env, base, ns string, want int) {
	t.Helper()
	applyPolicy(t, env, "t-lw-probe", `{precedence: 39, action: Limit, list: {maxUnpaginatedObjects: 1}, match: [{users: [lw-probe]}]}`)
	cfg := userConfig(t, env, "lw-probe", localcluster.GatewayAdminsGroup)
	cfg.Host = base
	probe := httpClient(t, cfg)
	var a answer
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		a = get(t, probe, base+"/api/v1/namespaces/"+ns+"/configmaps")
		return a.code == http.StatusForbidden && strings.Contains(a.message, "holds "+strconv.Itoa(want)), nil
	})
	if err != nil {
		t.Fatalf("the gateway at %s never counted %d ConfigMaps in %s: last %+v", base, want, ns, a)
	}
}

// watchListURL is what a client-go 1.36 informer sends to start: a
// watch-list, its initial sync streamed from the watch cache.
func watchListURL(base, ns string) string {
	return base + "/api/v1/namespaces/" + ns + "/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5"
}

// An informer's initial sync is a watch-list, not a LIST, and spends the
// same object budget: a client whose budget one informer has spent is
// refused a second one's sync with 429 and Retry-After; client-go retries
// the watch-list (it does not fall back to a LIST) and the informer syncs
// once the budget has refilled.
func TestListGuardInformerSyncSpendsListBudget(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	waitRootCA(t, env, ns)
	createConfigMaps(t, env, ns, "cm", 300)
	// 301 objects a sync; 400 of burst and 20/s: after one sync, the
	// next waits about 10 s (a wide margin on a slow machine).
	applyPolicy(t, env, "t-lw-sync", `{precedence: 40, action: Limit, list: {objectsPerSecond: 20, objectsBurst: 400, maxUnpaginatedObjects: 10}, watch: {maxPerClient: 20}, match: [{users: [lw-sync]}]}`)
	waitCounted(t, env, env.GatewayURL(), ns, 301)
	cfg := userConfig(t, env, "lw-sync", localcluster.GatewayAdminsGroup)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func() (*countingListWatch, cache.SharedIndexInformer) {
		lw := &countingListWatch{client: clientFor(t, cfg), ns: ns}
		informer := cache.NewSharedIndexInformer(lw.ListWatch(), &corev1.ConfigMap{}, 0, cache.Indexers{})
		go informer.RunWithContext(ctx)
		return lw, informer
	}
	lw1, first := start()
	if !cache.WaitForCacheSync(ctx.Done(), first.HasSynced) {
		t.Fatal("the first informer did not sync")
	}
	if n := len(first.GetStore().ListKeys()); n != 301 || lw1.lists.Load() != 0 {
		t.Fatalf("first informer: %d objects, %d LISTs; want 301 objects by a watch-list (client-go's default)", n, lw1.lists.Load())
	}
	series := `rampart_gateway_requests_total{code="429",policy="t-lw-sync",resource="configmaps",verb="watch"}`
	before := max(metric(scrape(t, env), series), 0)

	// What a client sees: the sync refused, with what to do.
	refused := get(t, httpClient(t, cfg), watchListURL(env.GatewayURL(), ns))
	if refused.code != http.StatusTooManyRequests {
		t.Fatalf("a watch-list right after a sync spent the budget: %+v, want 429", refused)
	}
	t.Logf("refusal: %s (Retry-After %s)", refused.message, refused.retryAfter)
	for _, want := range []string{`TrafficPolicy "t-lw-sync"`, "initial sync", "configmaps in namespace " + ns, "costs about 301 objects", `user "lw-sync"`, "SharedInformerFactory"} {
		if !strings.Contains(refused.message, want) {
			t.Errorf("refusal %q lacks %q", refused.message, want)
		}
	}
	if ra, err := strconv.Atoi(refused.retryAfter); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds", refused.retryAfter)
	}

	began := time.Now()
	lw2, second := start()
	syncCtx, cancelSync := context.WithTimeout(ctx, 90*time.Second)
	defer cancelSync()
	if !cache.WaitForCacheSync(syncCtx.Done(), second.HasSynced) {
		t.Fatalf("the second informer never synced after its watch-list was refused (%d LISTs, %d watch-lists or re-watches)", lw2.lists.Load(), lw2.relists.Load()+lw2.watches.Load())
	}
	took := time.Since(began)
	refusedSyncs := metric(scrape(t, env), series) - before
	t.Logf("second informer synced in %v; %v watch-lists refused with 429 at the gateway; %d LISTs", took.Round(10*time.Millisecond), refusedSyncs, lw2.lists.Load())
	if refusedSyncs < 2 { // the probe above and the informer's first try
		t.Errorf("%v watch-lists refused, want at least 2: the second informer's sync was never refused", refusedSyncs)
	}
	if n := len(second.GetStore().ListKeys()); n != 301 {
		t.Errorf("second informer holds %d objects, want 301", n)
	}
	if lw2.lists.Load() != 0 {
		t.Errorf("the refused informer fell back to %d LISTs: want it to retry the watch-list", lw2.lists.Load())
	}
	if n := metric(scrape(t, env), `rampart_gateway_rejections_total{policy="t-lw-sync",reason="list-cost"}`); n < 2 {
		t.Errorf("rejections{reason=list-cost} = %v, want at least 2", n)
	}
	if n := metric(scrape(t, env), `rampart_gateway_rejections_total{policy="t-lw-sync",reason="unpaginated-list"}`); n > 0 {
		t.Errorf("rejections{reason=unpaginated-list} = %v: a watch-list is served from the watch cache and must not be refused as unpaginated", n)
	}
}

// kube-apiserver's watch cache serves a LIST from resourceVersion=0 whole,
// whatever its limit; the gateway prices it so.
func TestListGuardResourceVersion0IgnoresLimit(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	waitRootCA(t, env, ns)
	createConfigMaps(t, env, ns, "cm", 300)
	ctx := context.Background()
	for _, url := range env.APIServerURLs() {
		cfg := *env.Config
		cfg.Host = url
		client := clientFor(t, &cfg)
		// The watch cache of an API server that did not take the creates
		// may lag them by a moment (it once served 297 of 301): ask again
		// until it holds them all, or say what it served.
		var rv0 *corev1.ConfigMapList
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if rv0, err = client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 10}); err != nil {
				t.Fatal(err)
			}
			if len(rv0.Items) >= 301 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		paged, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: resourceVersion=0&limit=10 returned %d items (continue %q); limit=10 returned %d", url, len(rv0.Items), rv0.Continue, len(paged.Items))
		if len(rv0.Items) != 301 || rv0.Continue != "" {
			t.Errorf("%s: resourceVersion=0&limit=10 returned %d items, continue %q; the gateway prices it at all 301", url, len(rv0.Items), rv0.Continue)
		}
		if len(paged.Items) != 10 || paged.Continue == "" {
			t.Errorf("%s: limit=10 returned %d items, continue %q; want a page of 10", url, len(paged.Items), paged.Continue)
		}
	}

	applyPolicy(t, env, "t-lw-rv0", `{precedence: 40, action: Limit, list: {objectsPerSecond: 20, objectsBurst: 200}, match: [{users: [lw-rv0, lw-paged]}]}`)
	waitCounted(t, env, env.GatewayURL(), ns, 301)
	base := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/configmaps"
	rv0 := httpClient(t, userConfig(t, env, "lw-rv0", localcluster.GatewayAdminsGroup))
	if a := get(t, rv0, base+"?resourceVersion=0&limit=10"); a.code != http.StatusOK {
		t.Fatalf("first resourceVersion=0&limit=10 LIST from a full budget: %+v, want 200", a)
	}
	a := get(t, rv0, base+"?resourceVersion=0&limit=10")
	if a.code != http.StatusTooManyRequests {
		t.Fatalf("second resourceVersion=0&limit=10 LIST: %+v, want 429: the first cost 301 objects, not 10", a)
	}
	t.Logf("refusal: %s", a.message)
	for _, want := range []string{`TrafficPolicy "t-lw-rv0"`, "costs about 301 objects", "whatever the limit", "limit=500 without resourceVersion=0"} {
		if !strings.Contains(a.message, want) {
			t.Errorf("refusal %q lacks %q", a.message, want)
		}
	}
	// Pages from etcd get what they ask for and cost that: 15 pages of
	// 10 fit in a budget of 200.
	paged := httpClient(t, userConfig(t, env, "lw-paged", localcluster.GatewayAdminsGroup))
	for i := range 15 {
		if a := get(t, paged, base+"?limit=10"); a.code != http.StatusOK {
			t.Fatalf("page %d of limit=10: %+v, want 200: priced at its limit", i, a)
		}
	}
}

// A resource counted since a guarded LIST stops being counted once no
// guarded LIST has come for CountIdleAfter (here 2 s), freeing its place
// under the cap, and is counted again at the next guarded LIST.
func TestListGuardCountStopsWhenIdle(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	waitRootCA(t, env, ns)
	createConfigMaps(t, env, ns, "cm", 10)
	admin, g := inProcessGateway(t, env, gateway.Options{CountIdleAfter: 2 * time.Second})
	counted := func() float64 {
		families, err := g.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "rampart_gateway_counted_resources" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	if n := counted(); n != 0 {
		t.Fatalf("rampart_gateway_counted_resources = %v before any LIST, want 0", n)
	}
	waitCounted(t, env, admin.Host, ns, 11)
	if n := counted(); n != 1 {
		t.Fatalf("rampart_gateway_counted_resources = %v after LISTs of configmaps, want 1", n)
	}
	idleSince := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return counted() == 0, nil
	})
	if err != nil {
		t.Fatalf("configmaps still counted %v after 2 s of no guarded LIST", time.Since(idleSince).Round(time.Second))
	}
	t.Logf("counting stopped %v after the last guarded LIST (idle 2 s, checked every 5 s)", time.Since(idleSince).Round(100*time.Millisecond))
	// Counted again, and refused again on the new count.
	waitCounted(t, env, admin.Host, ns, 11)
	if n := counted(); n != 1 {
		t.Errorf("rampart_gateway_counted_resources = %v after counting again, want 1", n)
	}
}

// The gateway may not read Secrets, yet a guarded LIST of them through it
// works: they are never counted per namespace, so they are priced by the
// API server's cluster-wide count, and a namespaced unpaginated LIST of
// them is not refused on a guess, where the same policy refuses one of
// ConfigMaps on their count.
func TestListGuardPricesSecretsWithoutReadingThem(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	waitRootCA(t, env, ns)
	for i := range 3 {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s-" + strconv.Itoa(i)}, StringData: map[string]string{"k": "v"}}
		if _, err := env.Client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createConfigMaps(t, env, ns, "cm", 2)
	admin, g := inProcessGateway(t, env, gateway.Options{})
	metric := func(name string) float64 {
		families, err := g.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				m := f.GetMetric()[0]
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		return -1
	}
	// The policy refuses lw-probe's unpaginated LISTs of more than one
	// object, and is in force: ConfigMaps (3 with kube-root-ca.crt) are
	// counted and refused.
	waitCounted(t, env, admin.Host, ns, 3)
	counted := metric("rampart_gateway_counted_resources")

	cfg := userConfig(t, env, "lw-probe", localcluster.GatewayAdminsGroup)
	cfg.Host = admin.Host
	probe := httpClient(t, cfg)
	// Once the gateway knows the cluster's count of Secrets (its scrape of
	// the API server's metrics), each such LIST is counted as uncounted.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		a := get(t, probe, admin.Host+"/api/v1/namespaces/"+ns+"/secrets")
		if a.code != http.StatusOK {
			t.Fatalf("guarded LIST of 3 Secrets in %s: %d %s; want 200 (priced by the cluster's count, not refused on a guess)", ns, a.code, a.message)
		}
		return metric("rampart_gateway_uncounted_lists_total") > 0, nil
	})
	if err != nil {
		t.Fatal("rampart_gateway_uncounted_lists_total stayed 0 under guarded LISTs of Secrets: the gateway never priced them as uncounted")
	}
	if n := metric("rampart_gateway_counted_resources"); n != counted {
		t.Errorf("rampart_gateway_counted_resources = %v after LISTs of Secrets, want %v (Secrets are never counted)", n, counted)
	}

	// The gateway's identity may not list, watch or get them.
	for _, verb := range []string{"list", "watch", "get"} {
		r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: gateway.RoleName, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed {
			t.Errorf("the gateway's identity %s may %s secrets in every namespace", gateway.RoleName, verb)
		}
	}
}
