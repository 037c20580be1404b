package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/cli"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
)

// TestTrafficLogRecordsEachRequestAndItsCost: the cluster's gateway
// process runs with --traffic-log. A client LISTs (in JSON, compressed
// by the API server, and in protobuf), GETs and watches; its lines say
// who, what, the answer's bytes, the objects listed and the events
// watched, and agree with the gateway's metrics; `rampart traffic
// profile` on the log shows the client and its cost. No body and no
// credential is in the log.
func TestTrafficLogRecordsEachRequestAndItsCost(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	user := "traffic-logged-" + ns
	policy := "t-traffic-log-" + ns
	const secret = "s3cr3t-value-never-logged"
	grant(t, env, policy, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}})
	applyPolicy(t, env, policy, fmt.Sprintf(`{precedence: 45, action: Limit, limit: {qps: 1000, burst: 1000}, match: [{users: [%q]}]}`, user))

	// Five labelled ConfigMaps, two of them large enough that the API
	// server compresses the LIST (over 128 KiB) for a client accepting
	// gzip, as Go's transport does.
	const listed = 5
	for i := range listed {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("logged-%d", i), Labels: map[string]string{"app": "traffic-log"}},
			Data: map[string]string{"password": secret}}
		if i < 2 {
			cm.Data["padding"] = strings.Repeat("p", 80*1024)
		}
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := userConfig(t, env, user)
	cfg.UserAgent = "traffic-log-test/1.0"
	jsonCfg := rest.CopyConfig(cfg)
	jsonCfg.AcceptContentTypes, jsonCfg.ContentType = "application/json", "application/json"
	protoCfg := rest.CopyConfig(cfg)
	protoCfg.AcceptContentTypes, protoCfg.ContentType = "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf"
	jsonClient, protoClient := clientFor(t, jsonCfg).CoreV1().ConfigMaps(ns), clientFor(t, protoCfg).CoreV1().ConfigMaps(ns)

	// The gateway has the policy once a request of the user counts
	// under it.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := jsonClient.Get(ctx, "logged-0", metav1.GetOptions{}); err != nil {
			return false, err
		}
		return strings.Contains(scrape(t, env), `rampart_gateway_requests_total{code="200",policy="`+policy+`"`), nil
	})
	if err != nil {
		t.Fatalf("the gateway never applied policy %s: %v", policy, err)
	}
	sel := metav1.ListOptions{LabelSelector: "app=traffic-log"}
	for _, c := range []struct {
		name string
		list func() (int, error)
	}{
		{"JSON", func() (int, error) { l, err := jsonClient.List(ctx, sel); return len(l.Items), err }},
		{"protobuf", func() (int, error) { l, err := protoClient.List(ctx, sel); return len(l.Items), err }},
	} {
		if n, err := c.list(); err != nil || n != listed {
			t.Fatalf("%s LIST: %d items, %v", c.name, n, err)
		}
	}
	// A watch that the API server ends after a second: it first sends
	// the five objects as ADDED events.
	timeout := int64(1)
	w, err := jsonClient.Watch(ctx, metav1.ListOptions{LabelSelector: "app=traffic-log", TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	watched := 0
	for range w.ResultChan() {
		watched++
	}
	if watched != listed {
		t.Fatalf("the watch sent %d events, want %d", watched, listed)
	}
	// A bad token is refused (401) and logged without the token.
	const badToken = "not-a-token-but-would-be-secret"
	req, _ := http.NewRequest(http.MethodGet, env.GatewayURL()+"/api/v1/namespaces/"+ns+"/configmaps", nil)
	req.Header.Set("Authorization", "Bearer "+badToken)
	anon := rest.CopyConfig(cfg)
	anon.TLSClientConfig.CertData, anon.TLSClientConfig.KeyData = nil, nil
	if resp, err := httpClient(t, anon).Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad token: %v %v, want 401", resp, err)
	}

	// The lines arrive once the gateway's writer has flushed them.
	var lines []trafficlog.Record
	var raw []byte
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		raw, lines = readTrafficLog(t, env.GatewayTrafficLog(), user)
		return len(byVerb(lines, "watch")) == 1 && len(byVerb(lines, "list")) == 2, nil
	})
	if err != nil {
		t.Fatalf("the traffic log has %d lines of %s, want its two LISTs and its watch: %s", len(lines), user, raw)
	}
	for _, l := range byVerb(lines, "list") {
		if l.Resource != "configmaps" || l.Namespace != ns || l.Code != 200 || l.ResponseBytes <= 0 || l.Objects == nil || *l.Objects != listed ||
			l.Policy != policy || l.Verdict != trafficlog.VerdictAdmitted || l.UserAgent != cfg.UserAgent || l.LatencyMillis <= 0 {
			t.Errorf("LIST line %+v; want configmaps in %s, 200, bytes, %d objects, policy %s, admitted", l, ns, listed, policy)
		}
	}
	gets := byVerb(lines, "get")
	if len(gets) == 0 || gets[0].Name != "logged-0" || gets[0].Code != 200 || gets[0].ResponseBytes <= 0 || gets[0].Objects != nil {
		t.Errorf("GET lines %+v; want logged-0, 200, bytes, no object count", gets)
	}
	wl := byVerb(lines, "watch")[0]
	if wl.WatchEvents != listed || wl.Code != 200 || wl.LatencyMillis < 500 || wl.ResponseBytes <= 0 {
		t.Errorf("watch line %+v; want %d events over about a second", wl, listed)
	}
	for _, bad := range []string{secret, badToken, "Bearer", "password"} {
		if bytes.Contains(raw, []byte(bad)) {
			t.Errorf("the traffic log holds %q", bad)
		}
	}
	// The refused request is in the log too, though its client is unknown.
	if all, _ := os.ReadFile(env.GatewayTrafficLog()); bytes.Contains(all, []byte(badToken)) || !bytes.Contains(all, []byte(`"code":401`)) {
		t.Errorf("the 401 is missing from the log, or its token is in it")
	}

	// The metrics agree with the lines.
	// (The first GET may have come before the gateway had the policy:
	// the metrics of the policy count its lines; the profile of the
	// client counts them all.)
	var bytesLogged, clientBytes int64
	for _, l := range lines {
		if l.Policy == policy {
			bytesLogged += l.ResponseBytes
		}
		clientBytes += l.ResponseBytes
	}
	m := scrape(t, env)
	labels := `{policy="` + policy + `",resource="configmaps"}`
	if got := metric(m, "rampart_gateway_list_objects_sum"+labels); got != 2*listed {
		t.Errorf("rampart_gateway_list_objects_sum = %v, want %d", got, 2*listed)
	}
	if got := metric(m, "rampart_gateway_list_objects_count"+labels); got != 2 {
		t.Errorf("rampart_gateway_list_objects_count = %v, want 2", got)
	}
	if got := metric(m, "rampart_gateway_watch_events_total"+labels); got != listed {
		t.Errorf("rampart_gateway_watch_events_total = %v, want %d", got, listed)
	}
	if got := metric(m, "rampart_gateway_response_bytes_total"+labels); got != float64(bytesLogged) {
		t.Errorf("rampart_gateway_response_bytes_total = %v, the log's lines %d", got, bytesLogged)
	}

	// rampart traffic profile reads the gateway's log as it is.
	out := profileJSON(t, env.GatewayTrafficLog())
	var found *trafficprofile.ClientProfile
	for i := range out.Clients {
		if c := &out.Clients[i]; c.User == user {
			found = c
		}
	}
	if found == nil {
		t.Fatalf("rampart traffic profile does not show %s", user)
	}
	if found.Lists != 2 || found.ListObjects != 2*listed || found.ListsUncounted != 0 || found.Watches != 1 || found.ResponseBytes != clientBytes || found.UserAgent != cfg.UserAgent {
		t.Errorf("profile of %s: %+v; want 2 LISTs of %d objects, 1 watch, %d bytes", user, found, listed, clientBytes)
	}
	if os.Getenv("RAMPART_KEEP_TRAFFIC_LINES") != "" {
		_ = os.WriteFile(os.Getenv("RAMPART_KEEP_TRAFFIC_LINES"), raw, 0o600)
	}
}

// readTrafficLog returns the traffic log's lines of user, raw and decoded.
func readTrafficLog(t *testing.T, path, user string) ([]byte, []trafficlog.Record) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var raw []byte
	var out []trafficlog.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r trafficlog.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("a traffic log line is not JSON: %v\n%s", err, sc.Bytes())
		}
		if r.Kind != trafficlog.Kind {
			t.Fatalf("a traffic log line of kind %q", r.Kind)
		}
		if r.User == user {
			raw = append(append(raw, sc.Bytes()...), '\n')
			out = append(out, r)
		}
	}
	return raw, out
}

func byVerb(lines []trafficlog.Record, verb string) []trafficlog.Record {
	var out []trafficlog.Record
	for _, l := range lines {
		if l.Verb == verb {
			out = append(out, l)
		}
	}
	return out
}

// profileJSON runs `rampart traffic profile -o json` on a log: the built
// binary when RAMPART_BIN names it, the command tree in-process otherwise.
func profileJSON(t *testing.T, path string) trafficprofile.Report {
	t.Helper()
	args := []string{"traffic", "profile", path, "-o", "json"}
	var out []byte
	var err error
	if bin := os.Getenv("RAMPART_BIN"); bin != "" {
		out, err = exec.Command(bin, args...).Output()
	} else {
		root := cli.NewRoot()
		var buf bytes.Buffer
		root.SetOut(&buf)
		root.SetArgs(args)
		err = root.ExecuteContext(context.Background())
		out = buf.Bytes()
	}
	if err != nil {
		t.Fatalf("rampart %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var r trafficprofile.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("rampart traffic profile -o json: %v\n%s", err, out)
	}
	return r
}
