package trafficprofile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// realLog is 418 lines of a local cluster's audit log (level Metadata),
// kept as kube-apiserver wrote them.
const realLog = "testdata/audit.log"

func profileOf(t *testing.T, data []byte, workers int) (Report, Stats) {
	t.Helper()
	p := NewProfiler()
	st, err := Read(bytes.NewReader(data), "test", workers, p.Add)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Report("requests")
	if err != nil {
		t.Fatal(err)
	}
	return r, st
}

// TestProfileCountsEveryRequestOfARealAuditLog checks the profile against
// a count done with encoding/json and the audit types, line by line.
func TestProfileCountsEveryRequestOfARealAuditLog(t *testing.T) {
	data, err := os.ReadFile(realLog)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	wantLists := map[string]int64{}
	var complete int64
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Stage != auditv1.StageResponseComplete {
			continue
		}
		complete++
		want[ev.User.Username+"|"+ev.UserAgent]++
		if ev.Verb == "list" {
			wantLists[ev.User.Username+"|"+ev.UserAgent]++
		}
	}
	for _, workers := range []int{1, 3} {
		r, st := profileOf(t, data, workers)
		if st.Requests != complete || r.Requests != complete || st.OtherStages != st.Lines-complete || st.Malformed != 0 {
			t.Fatalf("workers %d: read %+v, profiled %d; want %d requests", workers, st, r.Requests, complete)
		}
		if len(r.Clients) != len(want) {
			t.Errorf("workers %d: %d clients, want %d", workers, len(r.Clients), len(want))
		}
		for _, c := range r.Clients {
			k := c.User + "|" + c.UserAgent
			if c.Requests != want[k] || c.Lists != wantLists[k] || c.ListsUncounted != c.Lists {
				t.Errorf("workers %d: %s: %d requests, %d LISTs (%d uncounted); want %d, %d (all uncounted at level Metadata)", workers, k, c.Requests, c.Lists, c.ListsUncounted, want[k], wantLists[k])
			}
			var sum int64
			for _, n := range c.Series {
				sum += n
			}
			if sum != c.Requests || c.PeakPerSecond < 1 || c.PeakPerSecond > c.Requests {
				t.Errorf("%s: series sums to %d, peak %d/s, of %d requests", k, sum, c.PeakPerSecond, c.Requests)
			}
		}
	}
	r, _ := profileOf(t, data, 0)
	kinds := map[string]string{}
	for _, c := range r.Clients {
		kinds[c.Name()] = c.Kind
	}
	for name, kind := range map[string]string{"namespace-controller": KindControlPlane, "kube-scheduler": KindControlPlane} {
		if kinds[name] != kind {
			t.Errorf("client %s is of kind %q, want %q (clients: %v)", name, kinds[name], kind, kinds)
		}
	}
}

// TestObjectsAreCountedWhereTheLogShowsThem: an audit event at level
// Response carries the LIST's answer, a traffic record its count.
func TestObjectsAreCountedWhereTheLogShowsThem(t *testing.T) {
	ev := auditv1.Event{
		Level: auditv1.LevelRequestResponse, Stage: auditv1.StageResponseComplete, Verb: "list",
		RequestURI: "/api/v1/pods", ObjectRef: &auditv1.ObjectReference{Resource: "pods", APIVersion: "v1"},
	}
	ev.Kind, ev.APIVersion = "Event", "audit.k8s.io/v1"
	ev.User.Username = "alice"
	ev.RequestReceivedTimestamp.Time = time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	ev.StageTimestamp.Time = ev.RequestReceivedTimestamp.Add(40 * time.Millisecond)
	line, _ := json.Marshal(ev)
	// The answer as kube-apiserver embeds it: nested arrays and objects
	// inside items must not be counted as items.
	line = bytes.Replace(line, []byte(`"requestReceivedTimestamp"`), []byte(`"responseObject":{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"},"spec":{"containers":[{},{}]}},{"metadata":{"name":"b"}},{}]},"requestReceivedTimestamp"`), 1)
	rec := trafficlog.Record{Kind: trafficlog.Kind, Time: ev.RequestReceivedTimestamp.Time, User: "alice", Verb: "list", Resource: "pods", Code: 200,
		LatencyMillis: 12, ResponseBytes: 5000, Objects: ptr.To[int64](7), Verdict: trafficlog.VerdictAdmitted, SampleEvery: 2}
	recLine, _ := json.Marshal(rec)
	r, st := profileOf(t, append(append(line, '\n'), recLine...), 1)
	if st.Malformed != 0 || len(r.Clients) != 1 {
		t.Fatalf("read %+v, clients %+v", st, r.Clients)
	}
	c := r.Clients[0]
	// The traffic record stands for two requests (sampled one in two).
	if c.Requests != 3 || c.Lists != 3 || c.ListObjects != 3+2*7 || c.ListsUncounted != 0 || c.PeakListObjectsPerSecond != 17 {
		t.Errorf("profile %+v; want 3 LISTs of 17 objects, all counted, in one second", c)
	}
}

func TestUnreadableLogIsRefusedClearly(t *testing.T) {
	p := NewProfiler()
	_, err := Read(strings.NewReader("hello\nworld\n"), "notes.txt", 1, p.Add)
	if err == nil || !strings.Contains(err.Error(), "notes.txt: no line is an audit.k8s.io/v1 Event") {
		t.Fatalf("err = %v", err)
	}
}

// TestReplayRefusesOnlyTheClientOverItsLimit replays two clients on the
// log's own clock through the gateway's limiter.
func TestReplayRefusesOnlyTheClientOverItsLimit(t *testing.T) {
	policies := []traffic.Policy{{Name: "lists", Generation: 1, Spec: v1alpha1.TrafficPolicySpec{
		Precedence: 10, Action: v1alpha1.ActionLimit,
		Match: []v1alpha1.TrafficMatch{{Verbs: []string{"list"}}},
		Limit: &v1alpha1.TrafficLimit{QPS: ptr.To[int32](5), Key: v1alpha1.KeyUser},
	}}}
	rp := NewReplay(policies)
	start := time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	add := func(user string, at time.Duration) {
		rp.Add(&Entry{Time: start.Add(at), Latency: 10 * time.Millisecond, User: user, Verb: "list", Resource: "pods", APIVersion: "v1",
			URI: "/api/v1/pods", Code: 200, Objects: -1, Bytes: -1, Weight: 1})
	}
	// Written out of order by 50 ms, as an audit log is.
	for i := range 100 {
		add("storm", time.Duration(i)*100*time.Millisecond+time.Duration(i%2)*50*time.Millisecond)
	}
	for i := range 40 {
		add("calm", time.Duration(i)*250*time.Millisecond)
	}
	res := rp.Result()
	byUser := map[string]ReplayClient{}
	for _, c := range res.Clients {
		byUser[c.User] = c
	}
	// 10/s against 5/s with a burst of 5 over ~10 s: about half refused.
	if s := byUser["storm"]; s.Refused < 40 || s.Refused > 50 || s.ByReason["lists: rate"] != s.Refused || !strings.Contains(s.FirstMessage, `TrafficPolicy "lists"`) {
		t.Errorf("storm: %+v", s)
	}
	if c := byUser["calm"]; c.Refused != 0 || c.Requests != 40 {
		t.Errorf("calm: %+v", c)
	}
}

// TestSuggestedPoliciesRoundTrip: --suggest's YAML is read back by check,
// with the control plane exempt and each client's own limit.
func TestSuggestedPoliciesRoundTrip(t *testing.T) {
	data, err := os.ReadFile(realLog)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := profileOf(t, data, 0)
	var b bytes.Buffer
	if err := WritePolicies(&b, Suggest(r, SuggestOptions{Margin: 0.2})); err != nil {
		t.Fatal(err)
	}
	ps, err := ReadPolicies(b.Bytes(), "suggested.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if ps[0].Name != "suggested-control-plane" || ps[0].Spec.Action != v1alpha1.ActionExempt {
		t.Errorf("first policy %s %s, want the control plane exempt", ps[0].Name, ps[0].Spec.Action)
	}
	rp := NewReplay(ps)
	if _, err := Read(bytes.NewReader(data), "test", 0, rp.Add); err != nil {
		t.Fatal(err)
	}
	// Sized from this very log, nobody is refused by it.
	if res := rp.Result(); res.Refused != 0 || res.Unmatched != 0 {
		t.Errorf("replay of the log the policies were sized from: %d refused, %d unmatched", res.Refused, res.Unmatched)
	}
	if _, err := ReadPolicies([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), "cm.yaml"); err == nil || !strings.Contains(err.Error(), `cm.yaml, document 1: ConfigMap "x" is not a TrafficPolicy`) {
		t.Errorf("a ConfigMap: %v", err)
	}
}

// A client's busiest stretch of wall time can straddle two calendar
// seconds, which is how peaks are counted: its peak sent at the end of one
// second and again at the start of the next. Policies suggested from that
// very traffic must not refuse it.
func TestSuggestedLimitsHoldAPeakAcrossASecondBoundary(t *testing.T) {
	start := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	var entries []Entry
	for pair := range 4 {
		// Twenty at the end of an even second, twenty at the start of
		// the next: each calendar second holds 20 at most, a tenth of a
		// second of wall time holds 40.
		for _, at := range []time.Duration{time.Duration(2*pair)*time.Second + 950*time.Millisecond, time.Duration(2*pair+1) * time.Second} {
			for i := range 20 {
				entries = append(entries, Entry{Time: start.Add(at + time.Duration(i)*2*time.Millisecond), Latency: time.Millisecond,
					User: "bursty", UserAgent: "batch/1", Verb: "get", Resource: "configmaps", APIVersion: "v1",
					URI: "/api/v1/namespaces/a/configmaps/x", Code: 200, Objects: -1, Bytes: -1, Weight: 1})
			}
		}
	}
	p := NewProfiler()
	for i := range entries {
		p.Add(&entries[i])
	}
	r, err := p.Report("requests")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WritePolicies(&b, Suggest(r, SuggestOptions{Margin: 0.2})); err != nil {
		t.Fatal(err)
	}
	ps, err := ReadPolicies(b.Bytes(), "suggested.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rp := NewReplay(ps)
	for i := range entries {
		rp.Add(&entries[i])
	}
	if res := rp.Result(); res.Refused != 0 {
		t.Errorf("policies sized from a client's own traffic refused %d of its %d requests: %+v", res.Refused, res.Requests, res.Clients)
	}
}

// TestHTMLReportDrawsItsChartsInChromium opens the report in a real
// headless browser: the charts exist only once its script has run.
func TestHTMLReportDrawsItsChartsInChromium(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install -y chromium)")
	}
	data, err := os.ReadFile(realLog)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := profileOf(t, data, 0)
	var page bytes.Buffer
	if err := WriteHTML(&page, r, 10); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(page.Bytes(), []byte("<polyline")) || bytes.Contains(page.Bytes(), []byte("http://")) && !bytes.Contains(page.Bytes(), []byte(`"http://www.w3.org/2000/svg"`)) {
		t.Fatal("the page should draw its charts itself and fetch nothing")
	}
	file := t.TempDir() + "/profile.html"
	if err := os.WriteFile(file, page.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://"+file).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	series := strings.Count(dom, `class="series"`)
	bars := strings.Count(dom, `class="bar"`)
	if !strings.Contains(dom, `<svg id="rate-chart"`) || series != min(chartClients, len(r.Clients)) {
		t.Errorf("rate chart: %d series, want %d", series, min(chartClients, len(r.Clients)))
	}
	if !strings.Contains(dom, `<svg id="cost-chart"`) || bars != min(15, len(r.Resources)) {
		t.Errorf("cost chart: %d bars, want %d", bars, min(15, len(r.Resources)))
	}
	if !strings.Contains(dom, r.Clients[0].Name()) || strings.Count(dom, `class="legend-item"`) != series {
		t.Errorf("the legend does not name the top clients")
	}
}

// TestProfileReadsTheGatewaysTrafficLog profiles lines a real gateway
// wrote (internal/gateway's TestTrafficLogRecordsEachRequestAndItsCost,
// run with RAMPART_KEEP_TRAFFIC_LINES): a GET, a JSON LIST (compressed by
// the API server) and a protobuf LIST of five ConfigMaps, and a watch
// that sent five events, mixed with audit lines in one input.
func TestProfileReadsTheGatewaysTrafficLog(t *testing.T) {
	traffic, err := os.ReadFile("testdata/gateway-traffic.log")
	if err != nil {
		t.Fatal(err)
	}
	audit, err := os.ReadFile(realLog)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, l := range bytes.Split(bytes.TrimSpace(traffic), []byte("\n")) {
		var rec trafficlog.Record
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatal(err)
		}
		want += rec.ResponseBytes
	}
	r, st := profileOf(t, append(append(audit, '\n'), traffic...), 2)
	if st.Malformed != 0 {
		t.Fatalf("read %+v", st)
	}
	var c *ClientProfile
	for i := range r.Clients {
		if strings.HasPrefix(r.Clients[i].User, "traffic-logged-") {
			c = &r.Clients[i]
		}
	}
	if c == nil {
		t.Fatal("the gateway's client is not in the profile")
	}
	if c.Requests != 4 || c.Lists != 2 || c.ListObjects != 10 || c.ListsUncounted != 0 || c.Watches != 1 || c.WatchEvents != 5 ||
		c.ResponseBytes != want || c.ListBytes <= 0 || c.UserAgent != "traffic-log-test/1.0" {
		t.Errorf("profile %+v; want 4 requests, 2 LISTs of 5 objects, a watch of 5 events, %d bytes", c, want)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r, len(r.Clients)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "BYTES") || !strings.Contains(table.String(), c.User+" (traffic-log-test/1.0)") {
		t.Errorf("table:\n%s", table.String())
	}
}
