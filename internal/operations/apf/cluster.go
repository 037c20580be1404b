package apf

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

// ReadCluster reads the FlowSchemas and priority levels a cluster's API
// servers use.
func ReadCluster(ctx context.Context, cs kubernetes.Interface) (*Config, error) {
	fs, err := cs.FlowcontrolV1().FlowSchemas().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing FlowSchemas: %w", err)
	}
	pl, err := cs.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing PriorityLevelConfigurations: %w", err)
	}
	cfg := &Config{Levels: map[string]*flowcontrolv1.PriorityLevelConfiguration{}}
	schemas := make([]*flowcontrolv1.FlowSchema, len(fs.Items))
	for i := range fs.Items {
		schemas[i] = &fs.Items[i]
	}
	levels := make([]*flowcontrolv1.PriorityLevelConfiguration, len(pl.Items))
	for i := range pl.Items {
		levels[i] = &pl.Items[i]
	}
	cfg.Add(schemas, levels)
	return cfg, nil
}

// LevelMetrics is what one API server's /metrics says of a priority level.
type LevelMetrics struct {
	PriorityLevel string `json:"priorityLevel"`
	// Rejected counts 429s by reason (queue-full, time-out,
	// concurrency-limit, cancelled), summed over flow schemas.
	Rejected map[string]float64 `json:"rejected,omitempty"`
	// InQueue is the requests waiting now; Dispatched since the server
	// started, by flow schema.
	InQueue    float64            `json:"inQueue"`
	Dispatched map[string]float64 `json:"dispatched,omitempty"`
}

// ReadMetrics reads the APF metrics of the API server answering cs (the
// kubeconfig's rights must allow GET /metrics).
func ReadMetrics(ctx context.Context, cs kubernetes.Interface) ([]LevelMetrics, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics of the API server (needs the nonResourceURL /metrics, get): %w", err)
	}
	return ParseMetrics(bytes.NewReader(raw))
}

// ParseMetrics reads APF's metrics from a Prometheus text exposition.
func ParseMetrics(r io.Reader) ([]LevelMetrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	levels := map[string]*LevelMetrics{}
	level := func(m *dto.Metric) *LevelMetrics {
		name := label(m, "priority_level")
		l := levels[name]
		if l == nil {
			l = &LevelMetrics{PriorityLevel: name, Rejected: map[string]float64{}, Dispatched: map[string]float64{}}
			levels[name] = l
		}
		return l
	}
	for _, m := range families["apiserver_flowcontrol_rejected_requests_total"].GetMetric() {
		level(m).Rejected[label(m, "reason")] += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_flowcontrol_current_inqueue_requests"].GetMetric() {
		level(m).InQueue += m.GetGauge().GetValue()
	}
	for _, m := range families["apiserver_flowcontrol_dispatched_requests_total"].GetMetric() {
		level(m).Dispatched[label(m, "flow_schema")] += m.GetCounter().GetValue()
	}
	out := make([]LevelMetrics, 0, len(levels))
	for _, l := range levels {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b LevelMetrics) int { return cmp.Compare(a.PriorityLevel, b.PriorityLevel) })
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Audit tallies the clients of an audit log by where the cluster's APF
// puts them. kube-apiserver (v1.36) writes a request's flow schema and
// level to its HTTP log (apf_fs, apf_pl at -v=3) and to response headers
// (X-Kubernetes-PF-FlowSchema-UID), not to the audit log: each request is
// classified here against the cluster's own objects, as APF classifies it.
type Audit struct {
	cfg     *Config
	clients map[clientKey]*AuditClient
}

// AuditClient is one client on one flow schema.
type AuditClient struct {
	User          string   `json:"user"`
	Groups        []string `json:"groups,omitempty"`
	UserAgent     string   `json:"userAgent"`
	Proxy         string   `json:"proxy,omitempty"`
	Kind          string   `json:"kind"`
	FlowSchema    string   `json:"flowSchema"`
	PriorityLevel string   `json:"priorityLevel"`
	Requests      int64    `json:"requests"`
}

// NewAudit classifies against cfg.
func NewAudit(cfg *Config) *Audit { return &Audit{cfg: cfg, clients: map[clientKey]*AuditClient{}} }

// Add classifies one request.
func (a *Audit) Add(e *trafficprofile.Entry) {
	s, l := a.cfg.Classify(RequestOf(e))
	fs, pl := "(none)", "(none)"
	if s != nil {
		fs, pl = s.Name, l.Name
	}
	k := clientKey{e.User, e.UserAgent, e.Proxy, fs}
	c := a.clients[k]
	if c == nil {
		kind, _ := trafficprofile.Classify(e.User, e.Groups)
		c = &AuditClient{User: e.User, Groups: e.Groups, UserAgent: e.UserAgent, Proxy: e.Proxy, Kind: kind, FlowSchema: fs, PriorityLevel: pl}
		a.clients[k] = c
	}
	c.Requests += e.Weight
}

// Clients returns the tally, most requests first.
func (a *Audit) Clients() []AuditClient {
	out := make([]AuditClient, 0, len(a.clients))
	for _, c := range a.clients {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(x, y AuditClient) int {
		return cmp.Or(cmp.Compare(y.Requests, x.Requests), cmp.Compare(x.User, y.User), cmp.Compare(x.UserAgent, y.UserAgent), cmp.Compare(x.FlowSchema, y.FlowSchema))
	})
	return out
}

// Finding is one thing to fix, with what to do.
type Finding struct {
	// Kind: default-level, exempt, rejected, queued.
	Kind string `json:"kind"`
	What string `json:"what"`
	Do   string `json:"do"`
}

// Check lists what the cluster's APF does that it should not: clients on
// global-default or catch-all (nobody chose their level), clients exempt
// that are neither system:masters nor the control plane (never queued,
// never limited), and levels that rejected or are queuing requests.
func Check(clients []AuditClient, metrics []LevelMetrics) []Finding {
	var out []Finding
	for _, c := range clients {
		name := fmt.Sprintf("%s (%s)", c.User, c.UserAgent)
		if c.Proxy != "" {
			name += " via " + c.Proxy
		}
		switch {
		case c.PriorityLevel == "catch-all":
			out = append(out, Finding{Kind: "default-level", What: fmt.Sprintf("%s: %d requests on catch-all (flow schema %s), a level of 5 shares that rejects when full", name, c.Requests, c.FlowSchema),
				Do: "no other schema matches it: restore the built-in global-default FlowSchema, or give it one of its own (rampart traffic profile LOG --suggest=apf)"})
		case c.PriorityLevel == "global-default":
			out = append(out, Finding{Kind: "default-level", What: fmt.Sprintf("%s: %d requests on global-default (flow schema %s), shared with every unclassified client", name, c.Requests, c.FlowSchema),
				Do: "if it matters, give it a FlowSchema of its own or run it as a service account (service-accounts, workload-low); if it lists heavily, isolate it: rampart traffic profile LOG --suggest=apf"})
		case c.PriorityLevel == "exempt" && !slices.Contains(c.Groups, "system:masters") && !trafficprofile.Exempt(c.Kind):
			out = append(out, Finding{Kind: "exempt", What: fmt.Sprintf("%s: %d requests exempt from APF by flow schema %s, though neither system:masters nor the control plane", name, c.Requests, c.FlowSchema),
				Do: fmt.Sprintf("exempt requests are never queued or limited: take it out of FlowSchema %s (kubectl edit flowschema %s) and let it be fair-shared", c.FlowSchema, c.FlowSchema)})
		}
	}
	for _, l := range metrics {
		var rejected float64
		var reasons []string
		for reason, n := range l.Rejected {
			if n > 0 {
				rejected += n
				reasons = append(reasons, fmt.Sprintf("%s %.0f", reason, n))
			}
		}
		slices.Sort(reasons)
		if rejected > 0 {
			out = append(out, Finding{Kind: "rejected", What: fmt.Sprintf("priority level %s rejected %.0f requests (%s) since the API server started", l.PriorityLevel, rejected, strings.Join(reasons, ", ")),
				Do: fmt.Sprintf("find the flows it rejected (apiserver_flowcontrol_rejected_requests_total{priority_level=%q} by flow_schema); if they are legitimate raise its nominalConcurrencyShares or queue lengths, if one client floods it give that client a level of its own (rampart traffic profile LOG --suggest=apf)", l.PriorityLevel)})
		}
		if l.InQueue > 0 {
			out = append(out, Finding{Kind: "queued", What: fmt.Sprintf("priority level %s has %.0f requests waiting now", l.PriorityLevel, l.InQueue),
				Do: "a level whose queues stay full is too small for its traffic: see apiserver_flowcontrol_request_wait_duration_seconds for how long they wait"})
		}
	}
	return out
}

// WriteCheck writes the findings and the tally of clients by level.
func WriteCheck(w io.Writer, clients []AuditClient, findings []Finding) {
	if clients != nil {
		fmt.Fprintln(w, "CLIENT -> FLOW SCHEMA (LEVEL): REQUESTS")
		for _, c := range clients {
			name := fmt.Sprintf("%s (%s)", c.User, c.UserAgent)
			if c.Proxy != "" {
				name += " via " + c.Proxy
			}
			fmt.Fprintf(w, "  %s -> %s (%s): %d\n", name, c.FlowSchema, c.PriorityLevel, c.Requests)
		}
		fmt.Fprintln(w)
	}
	if len(findings) == 0 {
		fmt.Fprintln(w, "no findings: no client on global-default or catch-all, none exempt that should not be, no level rejected or queued")
		return
	}
	for _, f := range findings {
		fmt.Fprintf(w, "%s: %s\n  do: %s\n", strings.ToUpper(f.Kind), f.What, f.Do)
	}
}
