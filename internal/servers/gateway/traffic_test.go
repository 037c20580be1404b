package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

func trafficPolicy(t *testing.T, name, spec string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: rampart.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: "+name+"}\nspec: "+spec), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// applyPolicy creates or replaces a TrafficPolicy, deleted when the test
// ends.
func applyPolicy(t *testing.T, env *clustertest.Env, name, spec string) {
	t.Helper()
	ctx := context.Background()
	res := env.Dynamic.Resource(gateway.TrafficPolicies)
	u := trafficPolicy(t, name, spec)
	old, err := res.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		u.SetResourceVersion(old.GetResourceVersion())
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = res.Create(ctx, u, metav1.CreateOptions{})
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if err != nil {
		t.Fatalf("TrafficPolicy %s: %v", name, err)
	}
}

func TestMalformedTrafficPoliciesAreRejected(t *testing.T) {
	env := clustertest.Get(t)
	res := env.Dynamic.Resource(gateway.TrafficPolicies)
	create := func(spec string) error {
		u := trafficPolicy(t, "", spec)
		u.SetGenerateName("tp-")
		_, err := res.Create(context.Background(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, ok := range []string{
		`{precedence: 100, action: Exempt, match: [{groups: ["system:masters"]}]}`,
		`{precedence: 100, action: Limit, limit: {qps: 10, burst: 20, maxInFlight: 5}, match: [{verbs: [list], resources: [{apiGroups: [""], resources: [pods, "pods/log", "*/status"]}], namespaces: ["*"]}], except: [{userAgents: ["kube-controller-manager/*"]}]}`,
		`{precedence: 100, action: Limit, limit: {maxInFlight: 5, key: UserAgent}, match: [{nonResourceURLs: ["/metrics", "/debug/*"]}]}`,
		`{precedence: 100, action: Reject, rejectMessage: "read from the cache service", match: [{verbs: [list], userAgents: ["*python*"]}]}`,
		`{precedence: 100, action: Limit, list: {objectsPerSecond: 20000, objectsBurst: 50000, maxUnpaginatedObjects: 5000}, watch: {maxPerClient: 100, newPerSecond: 5, newBurst: 50, policyNewPerSecond: 100}, match: [{}]}`,
		`{precedence: 100, action: Limit, breaker: {open: true}, match: [{}]}`,
		`{precedence: 100, action: Limit, breaker: {rampSeconds: 60, trip: {errorPercent: 50, latencyMilliseconds: 5000, forSeconds: 5}}, match: [{}]}`,
		`{precedence: 100, action: Route, route: {pool: heavy}, match: [{groups: [reporting], verbs: [list]}]}`,
		`{precedence: 100, action: Route, route: {pool: batch-2, onUnavailable: Default}, match: [{userAgents: ["exporter/*"]}]}`,
	} {
		if err := create(ok); err != nil {
			t.Errorf("valid policy %s rejected: %v", ok, err)
		}
	}
	// A route's onUnavailable defaults to Reject: a storm moved away
	// stays away when its pool is down.
	u := trafficPolicy(t, "", `{precedence: 100, action: Route, route: {pool: heavy}, match: [{}]}`)
	u.SetGenerateName("tp-")
	created, err := res.Create(context.Background(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if got, _, _ := unstructured.NestedString(created.Object, "spec", "route", "onUnavailable"); err != nil || got != "Reject" {
		t.Errorf("route.onUnavailable defaulted to %q (%v), want Reject", got, err)
	}
	for spec, want := range map[string]string{
		`{precedence: 1, action: Limit, match: [{}]}`:                                                           "action Limit needs at least one of limit, list, watch or breaker",
		`{precedence: 1, action: Exempt, limit: {qps: 1}, match: [{}]}`:                                         "only action Limit may have them",
		`{precedence: 1, action: Reject, breaker: {open: true}, match: [{}]}`:                                   "only action Limit may have them",
		`{precedence: 1, action: Limit, list: {objectsBurst: 5}, match: [{}]}`:                                  "set objectsPerSecond, maxUnpaginatedObjects, or both",
		`{precedence: 1, action: Limit, list: {objectsPerSecond: 10, objectsBurst: 5}, match: [{}]}`:            "objectsBurst must be at least objectsPerSecond",
		`{precedence: 1, action: Limit, list: {maxUnpaginatedObjects: 10, key: Policy}, match: [{}]}`:           `Unsupported value: "Policy"`,
		`{precedence: 1, action: Limit, watch: {newBurst: 5}, match: [{}]}`:                                     "set at least one of maxPerClient, newPerSecond or policyNewPerSecond",
		`{precedence: 1, action: Limit, watch: {newPerSecond: 10, newBurst: 5}, match: [{}]}`:                   "newBurst must be at least newPerSecond",
		`{precedence: 1, action: Limit, breaker: {trip: {forSeconds: 5}}, match: [{}]}`:                         "set at least one of errorPercent, tooManyRequestsPercent or latencyMilliseconds",
		`{precedence: 1, action: Limit, breaker: {trip: {errorPercent: 101}}, match: [{}]}`:                     "should be less than or equal to 100",
		`{precedence: 1, action: Limit, limit: {burst: 5}, match: [{}]}`:                                        "set qps, maxInFlight, or both",
		`{precedence: 1, action: Limit, limit: {qps: 10, burst: 5}, match: [{}]}`:                               "burst must be at least qps",
		`{precedence: 1, action: Limit, limit: {qps: 10, key: User, fairShare: UserAgent}, match: [{}]}`:        "fairShare applies to key Policy only",
		`{precedence: 1, action: Limit, limit: {qps: 0}, match: [{}]}`:                                          "should be greater than or equal to 1",
		`{precedence: 0, action: Exempt, match: [{}]}`:                                                          "should be greater than or equal to 1",
		`{precedence: 1, action: Throttle, match: [{}]}`:                                                        `Unsupported value: "Throttle"`,
		`{precedence: 1, action: Exempt, match: []}`:                                                            "should have at least 1 items",
		`{precedence: 1, action: Exempt, match: [{verbs: [fetch]}]}`:                                            `Unsupported value: "fetch"`,
		`{precedence: 1, action: Exempt, match: [{nonResourceURLs: ["/a*b"]}]}`:                                 "should match",
		`{precedence: 1, action: Exempt, match: [{nonResourceURLs: ["/healthz"], namespaces: [default]}]}`:      "either resource requests",
		`{precedence: 1, action: Exempt, match: [{resources: [{apiGroups: [""], resources: ["pods/log/x"]}]}]}`: "should match",
		`{precedence: 1, action: Exempt, rejectMessage: "no", match: [{}]}`:                                     "rejectMessage is only for action Reject",
		`{precedence: 1, action: Route, match: [{}]}`:                                                           "action Route needs route",
		`{precedence: 1, action: Exempt, route: {pool: heavy}, match: [{}]}`:                                    "only action Route may have it",
		`{precedence: 1, action: Limit, limit: {qps: 1}, route: {pool: heavy}, match: [{}]}`:                    "only action Route may have it",
		`{precedence: 1, action: Route, route: {pool: Heavy_1}, match: [{}]}`:                                   "should match",
		`{precedence: 1, action: Route, route: {pool: heavy, onUnavailable: Drop}, match: [{}]}`:                `Unsupported value: "Drop"`,
		`{precedence: 1, action: Route, route: {onUnavailable: Reject}, match: [{}]}`:                           "spec.route.pool: Required value",
	} {
		if err := create(spec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("policy %s: err = %v, want Invalid naming %q", spec, err, want)
		}
	}
}

// answer is what a raw client sees: no client-go retries on 429, so the
// test sees each refusal.
type answer struct {
	code       int
	retryAfter string
	message    string
}

func get(t *testing.T, client *http.Client, url string) answer {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode >= 400 {
		var st metav1.Status
		_ = json.Unmarshal(body, &st)
		a.message = st.Message
	}
	return a
}

func httpClient(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A Limit policy answers 429 beyond its rate, with a Retry-After and a
// message naming the policy; editing it to Reject and deleting it take
// effect on the running gateway.
func TestLimitPolicyAppliedAndChangedWithoutRestart(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	applyPolicy(t, env, "t-slow-lister", `{precedence: 50, action: Limit, limit: {qps: 2, burst: 2, key: User}, accessLogPercent: 100, match: [{users: [lister], verbs: [list]}]}`)
	client := httpClient(t, userConfig(t, env, "lister"))
	other := httpClient(t, userConfig(t, env, "someone-else"))
	url := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/configmaps"

	var limited answer
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		limited = get(t, client, url)
		return limited.code == http.StatusTooManyRequests, nil
	})
	if err != nil {
		t.Fatalf("lister never limited by the new policy; last answer %+v", limited)
	}
	if !strings.Contains(limited.message, `TrafficPolicy "t-slow-lister"`) || !strings.Contains(limited.message, `user "lister" is over it`) {
		t.Errorf("429 message %q does not name the policy and the user", limited.message)
	}
	if n, err := strconv.Atoi(limited.retryAfter); err != nil || n < 1 || n > 3 {
		t.Errorf("Retry-After %q, want 1 to 3 seconds", limited.retryAfter)
	}
	// The policy names lister only: others are not limited (the API
	// server may still forbid them).
	for range 5 {
		if a := get(t, other, url); a.code == http.StatusTooManyRequests {
			t.Fatalf("another user limited by a policy that names only lister: %+v", a)
		}
	}

	applyPolicy(t, env, "t-slow-lister", `{precedence: 50, action: Reject, rejectMessage: "Lists are served by the cache service.", match: [{users: [lister], verbs: [list]}]}`)
	var rejected answer
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		rejected = get(t, client, url)
		return rejected.code == http.StatusForbidden && strings.Contains(rejected.message, "cache service"), nil
	})
	if err != nil {
		t.Fatalf("edited policy not applied: last answer %+v", rejected)
	}
	if !strings.Contains(rejected.message, `TrafficPolicy "t-slow-lister" refuses this request`) {
		t.Errorf("reject message %q does not name the policy", rejected.message)
	}
	if err := env.Dynamic.Resource(gateway.TrafficPolicies).Delete(context.Background(), "t-slow-lister", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		a := get(t, client, url)
		return a.code != http.StatusForbidden || !strings.Contains(a.message, "TrafficPolicy"), nil
	})
	if err != nil {
		t.Fatal("deleted policy still applied")
	}
	// accessLogPercent: 100 logs every admitted request of the policy.
	log, err := os.ReadFile(filepath.Join(env.Dir, "logs", localcluster.GatewayName+".log"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"policy":"t-slow-lister","user":"lister".*"verb":"list".*"refused":false`).Match(log) {
		t.Error("the gateway's access log has no admitted request of t-slow-lister (accessLogPercent: 100)")
	}
	metrics := scrape(t, env)
	if metric(metrics, `rampart_gateway_rejections_total{policy="t-slow-lister",reason="rate"}`) < 1 ||
		metric(metrics, `rampart_gateway_rejections_total{policy="t-slow-lister",reason="rejected"}`) < 1 {
		t.Errorf("rejections by t-slow-lister missing from the gateway's metrics")
	}
}

// Inside one Limit policy shared by a whole group, a client hammering the
// gateway is held to its share while a client under its share keeps
// getting through.
func TestNoisyClientCannotStarveOthersInPolicy(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	applyPolicy(t, env, "t-tenants", `{precedence: 40, action: Limit, limit: {qps: 20, burst: 20}, match: [{groups: [tenants]}]}`)
	for _, u := range []string{"noisy", "quiet"} {
		grant(t, env, "t-read-configmaps-"+u, u, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}})
	}
	noisy := httpClient(t, userConfig(t, env, "noisy", "tenants"))
	quiet := httpClient(t, userConfig(t, env, "quiet", "tenants"))
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), configMap("shared"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	url := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/configmaps/shared"
	// Wait until the gateway has the policy.
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return get(t, noisy, url).code == http.StatusTooManyRequests, nil
	})
	if err != nil {
		t.Fatal("the gateway never limited the tenants")
	}

	ctx, stop := context.WithTimeout(context.Background(), 4*time.Second)
	defer stop()
	var noisyOK, noisyLimited atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for ctx.Err() == nil {
				switch get(t, noisy, url).code {
				case http.StatusOK:
					noisyOK.Add(1)
				case http.StatusTooManyRequests:
					noisyLimited.Add(1)
				}
			}
		})
	}
	// The quiet client asks 4 times a second, under its share of 10/s.
	var quietOK, quietSent int
	var refusals []string
	tick := time.NewTicker(250 * time.Millisecond)
	for ctx.Err() == nil {
		<-tick.C
		quietSent++
		if a := get(t, quiet, url); a.code == http.StatusOK {
			quietOK++
		} else {
			refusals = append(refusals, a.message)
		}
	}
	tick.Stop()
	wg.Wait()
	t.Logf("noisy: %d admitted, %d limited; quiet: %d of %d admitted", noisyOK.Load(), noisyLimited.Load(), quietOK, quietSent)
	if noisyLimited.Load() == 0 {
		t.Fatal("the noisy client was never limited: the test shows nothing")
	}
	if quietOK != quietSent {
		t.Errorf("quiet client refused %d of %d times while under its share: %q", quietSent-quietOK, quietSent, refusals)
	}
	// At most the policy's 20/s and its burst, plus one burst of debt.
	if max := 4*20 + 20 + 20; noisyOK.Load() > int64(max) {
		t.Errorf("noisy client got %d requests in 4s through a 20/s policy", noisyOK.Load())
	}
}

// A policy sees each request as the API server authorizes it (issue 24):
// `GET .../secrets/NAME?watch=1` is a get, which the API server answers
// with the Secret, so a Reject policy on get secrets refuses it; and any
// watch value the API server reads as true (t, TRUE, empty) makes a watch.
func TestRejectPolicySeesRequestsAsTheAPIServerDoes(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	if _, err := env.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grant(t, env, "t-secret-reader", "secret-reader",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}})
	// Two policies, so that each refusal says how the gateway read the
	// request: as a get, or as a watch.
	applyPolicy(t, env, "t-no-secret-get", `{precedence: 40, action: Reject, match: [{users: [secret-reader], verbs: [get], resources: [{apiGroups: [""], resources: [secrets]}]}]}`)
	applyPolicy(t, env, "t-no-secret-watch", `{precedence: 41, action: Reject, match: [{users: [secret-reader], verbs: [watch], resources: [{apiGroups: [""], resources: [secrets]}]}]}`)
	client := httpClient(t, userConfig(t, env, "secret-reader"))
	client.Timeout = 30 * time.Second // a watch let through would end at timeoutSeconds
	base := env.GatewayURL() + "/api/v1/namespaces/" + ns + "/secrets"

	var a answer
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		a = get(t, client, base+"/db")
		b := get(t, client, base+"?watch=1&timeoutSeconds=1")
		return a.code == http.StatusForbidden && b.code == http.StatusForbidden, nil
	})
	if err != nil {
		t.Fatalf("GET or watch of Secrets never refused by the new policies; last answer to the GET %+v", a)
	}
	for query, policy := range map[string]string{
		"/db?watch=1":                  "t-no-secret-get",
		"/db?watch=true":               "t-no-secret-get",
		"?watch=t&timeoutSeconds=2":    "t-no-secret-watch",
		"?watch=TRUE&timeoutSeconds=2": "t-no-secret-watch",
		"?watch=&timeoutSeconds=2":     "t-no-secret-watch",
		"?watch=yes&timeoutSeconds=2":  "t-no-secret-watch",
	} {
		a := get(t, client, base+query)
		if a.code != http.StatusForbidden || !strings.Contains(a.message, `TrafficPolicy "`+policy+`" refuses this request`) {
			t.Errorf("GET secrets%s: %d %q; want 403 from TrafficPolicy %s", query, a.code, a.message, policy)
		}
	}
	// What the API server reads as a list is not matched: the policies
	// name get and watch only.
	for _, query := range []string{"", "?watch=0", "?watch=FALSE"} {
		if a := get(t, client, base+query); a.code != http.StatusOK {
			t.Errorf("LIST secrets%s: %d %q; want 200 (a list, which the policy does not name)", query, a.code, a.message)
		}
	}
}
