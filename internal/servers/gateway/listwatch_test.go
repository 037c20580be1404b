package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// createConfigMaps creates n small ConfigMaps in ns with the admin's
// direct client, a few at a time.
func createConfigMaps(t *testing.T, env *clustertest.Env, ns, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}, Data: map[string]string{"k": "v"}}
				if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatal(err)
	}
}

// kubeconfigFor writes cfg as a kubeconfig file for kubectl.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["gw"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "gw", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var holdsRE = regexp.MustCompile(`holds (\d+)`)

// waitRootCA waits for the kube-root-ca.crt that a controller puts in
// every namespace a moment after it is made, so that counts are known.
func waitRootCA(t *testing.T, env *clustertest.Env, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("kube-root-ca.crt never appeared in %s", ns)
	}
}

// The LIST guard with 1,200 ConfigMaps in one namespace and 3 in another:
// an unpaginated LIST of the big namespace is refused with the advice;
// paginated, from the cache, or of the small namespace it passes; and a
// client doing repeated full LISTs spends its object budget while another
// client of the same policy still gets through.
func TestListGuard(t *testing.T) {
	env := clustertest.Get(t)
	big, small := env.Namespace(t), env.Namespace(t)
	waitRootCA(t, env, big)
	waitRootCA(t, env, small)
	start := time.Now()
	createConfigMaps(t, env, big, "cm", 1200)
	createConfigMaps(t, env, small, "cm", 3)
	t.Logf("created 1,203 ConfigMaps in %v", time.Since(start).Round(time.Millisecond))

	t.Run("unpaginated", func(t *testing.T) {
		applyPolicy(t, env, "t-lw-unpaginated", `{precedence: 40, action: Limit, list: {maxUnpaginatedObjects: 1000}, match: [{users: [lw-lister], verbs: [list]}]}`)
		cfg := userConfig(t, env, "lw-lister", localcluster.GatewayAdminsGroup)
		client := httpClient(t, cfg)
		list := func(ns, query string) answer {
			return get(t, client, env.GatewayURL()+"/api/v1/namespaces/"+ns+"/configmaps"+query)
		}
		// The first guarded LIST of configmaps starts the gateway's count
		// of them per namespace; until it is synced nothing is refused.
		// The namespace's real count: its 1,200 ConfigMaps and, once the
		// root CA publisher has been by, kube-root-ca.crt.
		real := func(ctx context.Context) string {
			cms, err := env.Client.CoreV1().ConfigMaps(big).List(ctx, metav1.ListOptions{})
			if err != nil {
				return "unknown"
			}
			return strconv.Itoa(len(cms.Items))
		}
		var refused answer
		var want string
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			want = real(ctx)
			refused = list(big, "")
			m := holdsRE.FindStringSubmatch(refused.message)
			return refused.code == http.StatusForbidden && m != nil && m[1] == want, nil
		})
		if err != nil {
			t.Fatalf("an unpaginated LIST of the %s ConfigMaps was never refused naming that count; last answer %+v", want, refused)
		}
		t.Logf("refusal: %s", refused.message)
		for _, want := range []string{`TrafficPolicy "t-lw-unpaginated"`, "configmaps in namespace " + big, "limit=500", "resourceVersion=0"} {
			if !strings.Contains(refused.message, want) {
				t.Errorf("refusal %q lacks %q", refused.message, want)
			}
		}
		if refused.retryAfter != "" {
			t.Errorf("Retry-After %q on a refusal that retrying cannot change", refused.retryAfter)
		}
		for _, q := range []string{"?limit=500", "?resourceVersion=0", "?limit=0&resourceVersion=0"} {
			if a := list(big, q); a.code != http.StatusOK {
				t.Errorf("LIST %s%s: %+v, want 200", big, q, a)
			}
		}
		if a := list(small, ""); a.code != http.StatusOK {
			t.Errorf("unpaginated LIST of the 4 ConfigMaps of %s: %+v, want 200 even though the cluster holds thousands", small, a)
		}
		// kubectl paginates by default (--chunk-size=500): it works,
		// and without pagination it shows the advice.
		kc := kubeconfigFor(t, cfg)
		out, err := kubectl(t, env, kc, "get", "configmaps", "-n", big, "-o", "name")
		if err != nil || strconv.Itoa(strings.Count(out, "configmap/")) != want {
			t.Errorf("kubectl get configmaps -n %s through the gateway: %v, %d lines, want %s", big, err, strings.Count(out, "configmap/"), want)
		}
		out, err = kubectl(t, env, kc, "get", "configmaps", "-n", big, "--chunk-size=0")
		if err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, "limit=500") {
			t.Errorf("kubectl get --chunk-size=0: %v\n%s\nwant the refusal with its advice", err, out)
		}
		metrics := scrape(t, env)
		if n := metric(metrics, `rampart_gateway_rejections_total{policy="t-lw-unpaginated",reason="unpaginated-list"}`); n < 2 {
			t.Errorf("rejections{reason=unpaginated-list} = %v, want at least 2", n)
		}
		if n := metric(metrics, `rampart_gateway_known_objects{resource="configmaps"}`); n < 1203 {
			t.Errorf("rampart_gateway_known_objects{resource=configmaps} = %v, want at least 1203", n)
		}
	})

	t.Run("budget", func(t *testing.T) {
		applyPolicy(t, env, "t-lw-budget", `{precedence: 40, action: Limit, list: {objectsPerSecond: 500, objectsBurst: 2000}, match: [{users: [lw-heavy, lw-light], verbs: [list]}]}`)
		heavy := httpClient(t, userConfig(t, env, "lw-heavy", localcluster.GatewayAdminsGroup))
		light := httpClient(t, userConfig(t, env, "lw-light", localcluster.GatewayAdminsGroup))
		url := env.GatewayURL() + "/api/v1/namespaces/" + big + "/configmaps?resourceVersion=0"
		var refused answer
		admitted := 0
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			if refused = get(t, heavy, url); refused.code == http.StatusOK {
				admitted++
			}
			return refused.code == http.StatusTooManyRequests, nil
		})
		if err != nil {
			t.Fatalf("repeated full LISTs (1,201 objects each, budget 500/s burst 2000) never refused; last %+v", refused)
		}
		t.Logf("heavy: %d full LISTs admitted, then: %s (Retry-After %s)", admitted, refused.message, refused.retryAfter)
		for _, want := range []string{`TrafficPolicy "t-lw-budget"`, "costs about 1201 objects", `user "lw-heavy"`, "500 objects/s", "limit=500"} {
			if !strings.Contains(refused.message, want) {
				t.Errorf("refusal %q lacks %q", refused.message, want)
			}
		}
		if ra, err := strconv.Atoi(refused.retryAfter); err != nil || ra < 1 {
			t.Errorf("Retry-After %q, want whole seconds", refused.retryAfter)
		}
		if a := get(t, light, url); a.code != http.StatusOK {
			t.Errorf("another client of the same policy: %+v, want 200: budgets are per client", a)
		}
	})
}

// The gateway's count follows the objects: a namespace grows past the
// threshold and its unpaginated LIST is refused with the new count; it
// shrinks and the LIST passes again.
func TestListGuardCountFollowsObjects(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	createConfigMaps(t, env, ns, "a", 40)
	applyPolicy(t, env, "t-lw-follow", `{precedence: 40, action: Limit, list: {maxUnpaginatedObjects: 50}, match: [{users: [lw-follower], verbs: [list]}]}`)
	client := httpClient(t, userConfig(t, env, "lw-follower", localcluster.GatewayAdminsGroup))
	url := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/configmaps"
	if a := get(t, client, url); a.code != http.StatusOK {
		t.Fatalf("LIST of 41 objects under a threshold of 50: %+v", a)
	}
	createConfigMaps(t, env, ns, "b", 20)
	var a answer
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		a = get(t, client, url)
		return a.code == http.StatusForbidden && strings.Contains(a.message, "holds 61"), nil
	})
	if err != nil {
		t.Fatalf("after growing to 61 objects: %+v (%v), want a refusal naming 61", a, err)
	}
	for i := range 20 {
		if err := env.Client.CoreV1().ConfigMaps(ns).Delete(context.Background(), fmt.Sprint("a-", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		a = get(t, client, url)
		return a.code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("after shrinking to 41 objects the LIST is still refused: %+v", a)
	}
}

// openWatch opens a watch as client and returns once the gateway has
// answered; stop closes it.
func openWatch(t *testing.T, client *http.Client, url string) (code int, retryAfter string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After"), func() {}
	}
	return resp.StatusCode, "", func() { cancel(); resp.Body.Close() }
}

// A client holding maxPerClient watches is refused the next one, and gets
// it once it closes one.
func TestWatchCapPerClient(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	applyPolicy(t, env, "t-lw-watchcap", `{precedence: 40, action: Limit, watch: {maxPerClient: 3}, match: [{users: [lw-watcher]}]}`)
	client := httpClient(t, userConfig(t, env, "lw-watcher", localcluster.GatewayAdminsGroup))
	url := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/configmaps?watch=true&timeoutSeconds=120"
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	// The policy may take a moment to reach the gateway: open until
	// refused, then count.
	var refused answer
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _, stop := openWatch(t, client, url)
		if code == http.StatusOK {
			stops = append(stops, stop)
			return false, nil
		}
		refused = get(t, client, url)
		return true, nil
	})
	if err != nil || len(stops) < 3 || refused.code != http.StatusTooManyRequests {
		t.Fatalf("opened %d watches, then %+v (%v); want a 429 after 3", len(stops), refused, err)
	}
	// Watches opened before the policy arrived were not counted: start
	// again from none, now that it is in force.
	for _, s := range stops {
		s()
	}
	stops = nil
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, _, stop := openWatch(t, client, url)
		if code == http.StatusOK {
			stops = append(stops, stop)
		}
		return len(stops) == 3, nil
	})
	if err != nil {
		t.Fatal("after closing every watch, the client could not open 3 again")
	}
	if refused = get(t, client, url); refused.code != http.StatusTooManyRequests {
		t.Fatalf("a fourth open watch: %+v, want 429", refused)
	}
	for _, want := range []string{`TrafficPolicy "t-lw-watchcap"`, "3 open watches", `"lw-watcher" holds 3`} {
		if !strings.Contains(refused.message, want) {
			t.Errorf("refusal %q lacks %q", refused.message, want)
		}
	}
	stops[0]()
	stops = stops[1:]
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, _, stop := openWatch(t, client, url)
		if code == http.StatusOK {
			stops = append(stops, stop)
		}
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatal("after closing a watch, the client is still refused a new one")
	}
	if code, _, stop := openWatch(t, client, url); code != http.StatusTooManyRequests {
		stop()
		t.Errorf("a fourth open watch: %d, want 429", code)
	}
}

// 200 watchers reconnect at once against policyNewPerSecond 50: they are
// admitted over about 4 s at about the rate, and the Retry-Afters of the
// refused ones are spread, not all the same second.
func TestWatchStormSpreadOut(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	applyPolicy(t, env, "t-lw-storm", `{precedence: 40, action: Limit, watch: {policyNewPerSecond: 50, key: UserAgent}, match: [{users: [lw-storm]}]}`)
	cfg := userConfig(t, env, "lw-storm", localcluster.GatewayAdminsGroup)
	client := httpClient(t, cfg)
	url := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/configmaps?watch=true&timeoutSeconds=60"
	// Wait until the policy is in force: a probe watcher is refused
	// beyond one second's worth.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		refused := false
		for range 60 {
			code, _, stop := openWatch(t, client, url)
			stop()
			refused = refused || code == http.StatusTooManyRequests
		}
		return refused, nil
	})
	if err != nil {
		t.Fatal("t-lw-storm never applied")
	}
	time.Sleep(2 * time.Second) // the policy's bucket refills

	const watchers = 200
	var mu sync.Mutex
	var admittedAt []time.Duration
	retryAfters := map[string]int{}
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range watchers {
		wg.Go(func() {
			for time.Since(start) < 60*time.Second {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("User-Agent", fmt.Sprint("storm-watcher-", i))
				ctx, cancel := context.WithCancel(context.Background())
				resp, err := client.Do(req.WithContext(ctx))
				if err != nil {
					cancel()
					t.Error(err)
					return
				}
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					admittedAt = append(admittedAt, time.Since(start))
					stops = append(stops, func() { cancel(); resp.Body.Close() })
					mu.Unlock()
					return
				}
				resp.Body.Close()
				cancel()
				ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if resp.StatusCode != http.StatusTooManyRequests || err != nil {
					t.Errorf("watcher %d: %d, Retry-After %q", i, resp.StatusCode, resp.Header.Get("Retry-After"))
					return
				}
				mu.Lock()
				if len(admittedAt) < watchers && time.Since(start) < time.Second {
					retryAfters[resp.Header.Get("Retry-After")]++
				}
				mu.Unlock()
				time.Sleep(time.Duration(ra) * time.Second) // as client-go does
			}
		})
	}
	wg.Wait()
	sort.Slice(admittedAt, func(i, j int) bool { return admittedAt[i] < admittedAt[j] })
	if len(admittedAt) != watchers {
		t.Fatalf("%d of %d watchers admitted within a minute", len(admittedAt), watchers)
	}
	first, last := admittedAt[0], admittedAt[len(admittedAt)-1]
	inFirstSecond := sort.Search(len(admittedAt), func(i int) bool { return admittedAt[i] >= first+900*time.Millisecond })
	perSecond := map[int]int{}
	for _, d := range admittedAt {
		perSecond[int(d/time.Second)]++
	}
	t.Logf("admitted: first %v, last %v, %d in the first 0.9 s, per second %v; first-wave Retry-Afters %v",
		first.Round(time.Millisecond), last.Round(time.Millisecond), inFirstSecond, perSecond, retryAfters)
	if inFirstSecond > 90 { // 50, and what refills while the first wave arrives
		t.Errorf("%d watches admitted in the storm's first 0.9 s, want about 50 (the rate)", inFirstSecond)
	}
	if last-first < 2500*time.Millisecond {
		t.Errorf("the storm was admitted within %v, want it spread over ~3-4 s at 50/s", last-first)
	}
	if len(retryAfters) < 3 {
		t.Errorf("Retry-Afters of the first wave %v: want at least 3 distinct seconds", retryAfters)
	}
	for ra, n := range retryAfters {
		if n > 70 {
			t.Errorf("%d watchers told Retry-After %s: the storm is not spread", n, ra)
		}
	}
}

// countingListWatch counts what a reflector asks for: LISTs and
// watch-lists (sendInitialEvents) are relists, other watches resume from
// a resourceVersion.
type countingListWatch struct {
	client           kubernetes.Interface
	ns               string
	relists, watches atomic.Int64
	// lists are the relists that were LISTs, not watch-lists.
	lists atomic.Int64
}

func (c *countingListWatch) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			c.relists.Add(1)
			c.lists.Add(1)
			return c.client.CoreV1().ConfigMaps(c.ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				c.relists.Add(1)
			} else {
				c.watches.Add(1)
			}
			// Short watches: the reflector re-watches every few
			// seconds, so that a refused re-watch shows within the
			// test. (Under a second with no event, a reflector takes
			// the watch for broken and relists.)
			o.TimeoutSeconds = ptr.To(int64(3))
			return c.client.CoreV1().ConfigMaps(c.ns).Watch(ctx, o)
		},
	}
}

// A client-go informer whose re-watch is refused with 429 waits and
// watches again from where it was: it does not relist, and it sees what
// changed meanwhile.
func TestInformerRetriesRefusedWatchWithoutRelisting(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	applyPolicy(t, env, "t-lw-informer", `{precedence: 40, action: Limit, watch: {maxPerClient: 100}, match: [{users: [lw-informer]}]}`)
	cfg := userConfig(t, env, "lw-informer", localcluster.GatewayAdminsGroup)
	lw := &countingListWatch{client: clientFor(t, cfg), ns: ns}
	informer := cache.NewSharedIndexInformer(lw.ListWatch(), &corev1.ConfigMap{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	// Two watches held open by the same user, then the cap lowered to
	// two: the informer's next re-watch is refused (the cap keeps
	// counting watches opened before the edit).
	client := httpClient(t, cfg)
	url := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/secrets?watch=true&timeoutSeconds=120"
	var stops []func()
	for range 2 {
		code, _, stop := openWatch(t, client, url)
		if code != http.StatusOK {
			t.Fatalf("blocking watch: %d", code)
		}
		stops = append(stops, stop)
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	before := metric(scrape(t, env), `rampart_gateway_requests_total{code="429",policy="t-lw-informer",resource="configmaps",verb="watch"}`)
	applyPolicy(t, env, "t-lw-informer", `{precedence: 40, action: Limit, watch: {maxPerClient: 2}, match: [{users: [lw-informer]}]}`)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return metric(scrape(t, env), `rampart_gateway_requests_total{code="429",policy="t-lw-informer",resource="configmaps",verb="watch"}`) >= max(before, 0)+2, nil
	})
	if err != nil {
		t.Fatal("the informer's re-watch was never refused")
	}
	relists, watches := lw.relists.Load(), lw.watches.Load()
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("while-refused"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stops[0]()
	stops = stops[1:]
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := informer.GetStore().GetByKey(ns + "/while-refused")
		return ok, nil
	})
	if err != nil {
		t.Fatal("the informer never saw the ConfigMap created while its watch was refused")
	}
	refusedWatches := metric(scrape(t, env), `rampart_gateway_requests_total{code="429",policy="t-lw-informer",resource="configmaps",verb="watch"}`) - max(before, 0)
	t.Logf("informer: %d relists (LIST or watch-list), %d watches seen by the reflector; %v watches refused with 429 at the gateway", lw.relists.Load(), lw.watches.Load(), refusedWatches)
	if lw.relists.Load() != 1 {
		t.Errorf("the informer relisted %d times, want only its first sync: a 429 on a watch must not make it relist", lw.relists.Load()-1)
	}
	if lw.relists.Load() != relists || lw.watches.Load() < watches {
		t.Errorf("counts went backwards or relisted: relists %d→%d", relists, lw.relists.Load())
	}
	if err := env.Client.CoreV1().ConfigMaps(ns).Delete(ctx, "while-refused", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
