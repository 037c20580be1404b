package localcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/apf"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

// impersonating is a client of the admin (system:masters, allowed to
// impersonate anyone) acting as user, as kubectl --as does; it records
// the APF flow schema the API server answered each request with.
type impersonating struct {
	cs      kubernetes.Interface
	mu      sync.Mutex
	schemas map[string]int // flow schema UID -> requests
}

func impersonate(t *testing.T, env *clustertest.Env, user string, groups ...string) *impersonating {
	t.Helper()
	c := &impersonating{schemas: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				c.mu.Lock()
				c.schemas[resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)]++
				c.mu.Unlock()
			}
			return resp, err
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.cs = cs
	return c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Requests sent with kubectl --as (client-go's Impersonate) are profiled
// as the impersonated users, shown via the admin who sent them. The APF
// objects suggested from that profile are accepted by the real API
// server, which classifies requests as Rampart's replay predicts (the
// X-Kubernetes-PF-FlowSchema-UID of each answer), and rampart apf check
// finds the users left on global-default.
func TestSuggestedAPFOnARealAPIServer(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	since := time.Now().Add(-time.Second)

	alice := impersonate(t, env, "t-apf-alice")
	backup := impersonate(t, env, "t-apf-backup")
	// Alice's few requests; the backup tool's LISTs, eight at a time.
	for range 5 {
		_, _ = alice.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		_, _ = alice.cs.CoreV1().ConfigMaps(ns).Get(ctx, "none", metav1.GetOptions{})
	}
	listStorm := func(c *impersonating) {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					_, _ = c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				}
			})
		}
		wg.Wait()
	}
	listStorm(backup)

	report := profileSince(t, env, since)
	byName := map[string]trafficprofile.ClientProfile{}
	for _, c := range report.Clients {
		byName[c.User] = c
	}
	a, b := byName["t-apf-alice"], byName["t-apf-backup"]
	if a.Requests != 10 || a.Proxy == "" || b.Requests != 80 || b.Proxy != a.Proxy {
		t.Fatalf("impersonated users not profiled as themselves via the admin: alice %+v, backup %+v", a, b)
	}
	var table bytes.Buffer
	_ = trafficprofile.WriteTable(&table, report, 50)
	if !strings.Contains(table.String(), "t-apf-alice (") || !strings.Contains(table.String(), "via "+a.Proxy) {
		t.Errorf("the table does not name the impersonated users:\n%s", table.String())
	}
	t.Logf("alice via %s; backup's LISTs held %d seats at once", a.Proxy, b.PeakListSeats)

	// Suggest, apply and wait for the API server to use the objects.
	s := apf.Suggest(report, apf.SuggestOptions{Margin: 0.2, Prefix: "t-apf", HeavyListSeats: 2})
	if len(s.Schemas) != 1 || !slices.ContainsFunc(s.Schemas[0].Spec.Rules[0].Subjects, func(x flowcontrolv1.Subject) bool { return x.User != nil && x.User.Name == "t-apf-backup" }) {
		var y bytes.Buffer
		_ = apf.Write(&y, s)
		t.Fatalf("want the backup tool's LISTs isolated (it held %d seats at once):\n%s", b.PeakListSeats, y.String())
	}
	fc := env.Client.FlowcontrolV1()
	for _, l := range s.Levels {
		if _, err := fc.PriorityLevelConfigurations().Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refused the suggested level: %v", err)
		}
		t.Cleanup(func() {
			_ = fc.PriorityLevelConfigurations().Delete(context.Background(), l.Name, metav1.DeleteOptions{})
		})
	}
	for _, f := range s.Schemas {
		if _, err := fc.FlowSchemas().Create(ctx, f, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refused the suggested flow schema: %v", err)
		}
		t.Cleanup(func() { _ = fc.FlowSchemas().Delete(context.Background(), f.Name, metav1.DeleteOptions{}) })
	}
	heavy := s.Schemas[0].Name
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		f, err := fc.FlowSchemas().Get(ctx, heavy, metav1.GetOptions{})
		return err == nil && len(f.Status.Conditions) > 0 && f.Status.Conditions[0].Status == flowcontrolv1.ConditionFalse, nil
	}); err != nil {
		t.Fatalf("flow schema %s not taken up (Dangling is not False)", heavy)
	}
	current, err := apf.ReadCluster(ctx, env.Client)
	if err != nil {
		t.Fatal(err)
	}
	uid := map[string]string{}
	for _, f := range current.Schemas {
		uid[string(f.UID)] = f.Name
	}

	// The API server's answers, and Rampart's classification of the same
	// requests, agree.
	since2 := time.Now().Add(-time.Second)
	alice2, backup2 := impersonate(t, env, "t-apf-alice"), impersonate(t, env, "t-apf-backup")
	lister := impersonate(t, env, "system:serviceaccount:"+ns+":lister", "system:serviceaccounts", "system:serviceaccounts:"+ns)
	admin := impersonate(t, env, "")
	_, _ = alice2.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	_, _ = backup2.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	_, _ = backup2.cs.CoreV1().ConfigMaps(ns).Get(ctx, "none", metav1.GetOptions{})
	_, _ = lister.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	_, _ = admin.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	answered := func(c *impersonating) []string {
		var out []string
		for u, n := range c.schemas {
			out = append(out, fmt.Sprintf("%s×%d", uid[u], n))
		}
		slices.Sort(out)
		return out
	}
	for name, tc := range map[string]struct {
		c    *impersonating
		want []string
	}{
		"alice":                      {alice2, []string{"global-default×1"}},
		"backup (a LIST, a GET)":     {backup2, []string{"global-default×1", heavy + "×1"}},
		"a service account":          {lister, []string{"service-accounts×1"}},
		"the admin (system:masters)": {admin, []string{"exempt×1"}},
	} {
		if got := answered(tc.c); !slices.Equal(got, tc.want) {
			t.Errorf("%s: the API server answered with flow schemas %v, want %v", name, got, tc.want)
		}
	}
	audit := apf.NewAudit(current)
	replay := apf.NewReplay(current, apf.DefaultServerSeats)
	readAudit(t, env, since2, func(e *trafficprofile.Entry) {
		if strings.HasPrefix(e.User, "t-apf-") || e.User == "system:serviceaccount:"+ns+":lister" {
			audit.Add(e)
			replay.Add(e)
		}
	})
	classified := map[string]string{}
	for _, c := range audit.Clients() {
		classified[c.User+" "+c.FlowSchema] = c.PriorityLevel
	}
	for _, want := range []string{"t-apf-alice global-default", "t-apf-backup " + heavy, "t-apf-backup global-default", "system:serviceaccount:" + ns + ":lister service-accounts"} {
		if _, ok := classified[want]; !ok {
			t.Errorf("Rampart's classification of the audit log lacks %q: %v", want, classified)
		}
	}
	if res := replay.Result(); len(res.Clients) != 4 {
		t.Errorf("replay: %+v", res.Clients)
	}

	// apf check: alice is on global-default; the metrics are read.
	metrics, err := apf.ReadMetrics(ctx, env.Client)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(metrics, func(l apf.LevelMetrics) bool {
		return l.PriorityLevel == "global-default" && l.Dispatched["global-default"] > 0
	}) {
		t.Errorf("metrics: no request dispatched on global-default: %+v", metrics)
	}
	var out bytes.Buffer
	apf.WriteCheck(&out, audit.Clients(), apf.Check(audit.Clients(), metrics))
	if !strings.Contains(out.String(), "DEFAULT-LEVEL: t-apf-alice (") {
		t.Errorf("apf check does not name alice on global-default:\n%s", out.String())
	}
	t.Logf("apf check:\n%s", out.String())
}

// readAudit reads the cluster's audit log, requests received after since.
func readAudit(t *testing.T, env *clustertest.Env, since time.Time, fn func(*trafficprofile.Entry)) {
	t.Helper()
	// The API server writes an event once the request ends; give the
	// last ones a moment.
	time.Sleep(time.Second)
	f, err := os.Open(env.Dir + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := trafficprofile.Read(f, "audit.log", 1, func(e *trafficprofile.Entry) {
		if e.Time.After(since) {
			fn(e)
		}
	}); err != nil {
		t.Fatal(err)
	}
}

func profileSince(t *testing.T, env *clustertest.Env, since time.Time) trafficprofile.Report {
	t.Helper()
	p := trafficprofile.NewProfiler()
	readAudit(t, env, since, p.Add)
	r, err := p.Report("requests")
	if err != nil {
		t.Fatal(err)
	}
	return r
}
