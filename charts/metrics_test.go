// Package charts_test checks what the Helm chart ships against what the
// code does: the dashboard and the alert rules must query only metrics and
// labels that Rampart (or controller-runtime under it) exports, so a
// renamed metric or label breaks a test rather than an on-call's graph.
package charts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	validatingmetrics "k8s.io/apiserver/pkg/admission/plugin/policy/validating/metrics"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	// Registers the admission metrics (denials, warnings, budgets, flow
	// control, change windows) in controller-runtime's registry, as the
	// manager binary does.
	_ "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/servers/gateway"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
	// The recycle bin's metrics, registered by the manager package.
	_ "github.com/rampart-io/rampart/internal/servers/manager"
)

const (
	dashboardFile = "rampart/files/dashboard.json"
	alertsFile    = "rampart/files/alerts.yaml"
	// managerDirs hold collectors the manager registers only in Run, which
	// needs a cluster (see managerDescs).
)

var managerDirs = append(collectorDirs("../internal/protection/*/admit"), "../internal/servers/manager/controller/quotawatch")

// collectorDirs are the protections' folders that define collectors of
// their own (OwnsCollectors): a new protection's are checked with no
// line here.
func collectorDirs(pattern string) []string {
	dirs, _ := filepath.Glob(pattern)
	var out []string
	for _, d := range dirs {
		files, _ := filepath.Glob(filepath.Join(d, "*.go"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && !strings.HasSuffix(f, "_test.go") && strings.Contains(string(b), "prometheus.NewDesc(") {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// targetLabels are added by Prometheus (job, instance) and the Prometheus
// operator's ServiceMonitor (the rest) to every scraped series.
var targetLabels = set("job", "instance", "namespace", "service", "pod", "container", "endpoint")

// catalog maps every series name a query may use to its label names.
type catalog map[string]map[string]bool

var exportedOnce = sync.OnceValues(exportedCatalog)

// exportedCatalog is what the code exports: the gateway's own registry and
// controller-runtime's (the manager's), read through Describe so that a
// metric vector with no children yet is known too. Histogram and summary
// types come from Gather, after one request through the gateway and one
// through a controller-runtime webhook have given their histograms a child.
func exportedCatalog() (catalog, error) {
	gw, err := newGateway()
	if err != nil {
		return nil, err
	}
	exerciseGateway(gw)
	// The node guard's own registry (its vetoes are counted by reason).
	guard := nodeguard.NewMetrics()
	exerciseWebhook()
	crRegistry, ok := metrics.Registry.(prometheus.Collector)
	if !ok {
		return nil, fmt.Errorf("controller-runtime's metrics.Registry (%T) cannot Describe", metrics.Registry)
	}
	mgr, err := managerDescs()
	if err != nil {
		return nil, err
	}
	c := catalog{}
	for _, src := range []struct {
		describe prometheus.Collector
		gather   prometheus.Gatherer
		extra    []*prometheus.Desc
	}{
		{gw.Registry(), gw.Registry(), nil},
		{guard.Registry, guard.Registry, nil},
		{crRegistry, metrics.Registry, mgr},
	} {
		descs := describe(src.describe)
		descs = append(descs, src.extra...)
		if err := c.addDescs(descs); err != nil {
			return nil, err
		}
		families, err := src.gather.Gather()
		if err != nil {
			return nil, err
		}
		c.addTypes(families)
	}
	// The dashboard adds the API server's own count of the compiled
	// policies' decisions: its metric as k8s.io/apiserver defines it.
	validatingmetrics.Metrics.ObserveRejection(context.Background(), 0, "p", "b", validatingmetrics.ValidationNoError)
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	var vap []*dto.MetricFamily
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "apiserver_validating_admission_policy_") {
			labels := set()
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = true
				}
			}
			c[f.GetName()] = labels
			vap = append(vap, f)
		}
	}
	if _, ok := c["apiserver_validating_admission_policy_check_total"]; !ok {
		return nil, fmt.Errorf("k8s.io/apiserver no longer defines apiserver_validating_admission_policy_check_total")
	}
	c.addTypes(vap)
	return c, nil
}

// newGateway builds a gateway as `rampart gateway` does; New contacts no
// API server, so an address nothing listens on will do.
func newGateway() (*gateway.Gateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	return gateway.New(&rest.Config{Host: "https://" + addr, BearerToken: "unused"},
		gateway.Options{Log: slog.New(slog.DiscardHandler), Name: "charts-test"})
}

// exerciseGateway sends one anonymous GET; the API server is unreachable,
// but the request is timed all the same.
func exerciseGateway(g *gateway.Gateway) {
	g.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/v1/namespaces", nil))
}

// exerciseWebhook serves one (malformed) review through controller-runtime's
// instrumentation, the same that wraps every path the manager registers.
func exerciseWebhook() {
	h, _ := admission.StandaloneWebhook(&admission.Webhook{Handler: admission.HandlerFunc(
		func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })},
		admission.StandaloneOptions{MetricsPath: "/charts-test"})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/charts-test", strings.NewReader("{}")))
}

// managerDescs reads the prometheus.NewDesc calls of the collectors the
// manager registers (a protection's OwnsCollectors, quotawatch's): those
// collectors (the DeletionFlowControl breaker gauges) are registered only in
// manager.Run, which needs a cluster, and are unexported. The Go parser, not
// a text search, finds the name and label literals; a call it cannot read
// fails the test.
func managerDescs() ([]*prometheus.Desc, error) {
	var out []*prometheus.Desc
	for _, dir := range managerDirs {
		descs, err := descsIn(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, descs...)
	}
	return out, nil
}

// descsIn reads the prometheus.NewDesc calls of the Go files in managerDir.
func descsIn(managerDir string) ([]*prometheus.Desc, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(managerDir)
	if err != nil {
		return nil, err
	}
	var out []*prometheus.Desc
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, managerDir+"/"+e.Name(), nil, 0)
		if err != nil {
			return nil, err
		}
		var inspectErr error
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || inspectErr != nil {
				return inspectErr == nil
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "NewDesc" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
				return true
			}
			name, err := stringLit(call.Args[0])
			if err != nil {
				inspectErr = fmt.Errorf("%s: metric name: %w", fset.Position(call.Pos()), err)
				return false
			}
			var labels []string
			if lit, ok := call.Args[2].(*ast.CompositeLit); ok {
				for _, el := range lit.Elts {
					l, err := stringLit(el)
					if err != nil {
						inspectErr = fmt.Errorf("%s: label of %s: %w", fset.Position(el.Pos()), name, err)
						return false
					}
					labels = append(labels, l)
				}
			} else if id, ok := call.Args[2].(*ast.Ident); !ok || id.Name != "nil" {
				inspectErr = fmt.Errorf("%s: labels of %s are not a literal: teach this test to read them", fset.Position(call.Pos()), name)
				return false
			}
			out = append(out, prometheus.NewDesc(name, "from source", labels, nil))
			return true
		})
		if inspectErr != nil {
			return nil, inspectErr
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no prometheus.NewDesc in %s: the manager's collectors moved; update managerDescs", managerDir)
	}
	return out, nil
}

func stringLit(e ast.Expr) (string, error) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", fmt.Errorf("not a string literal")
	}
	return strconv.Unquote(lit.Value)
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// descriptions emits, for each Desc, one untyped metric with placeholder
// label values, so that a scratch registry's Gather reports each Desc's
// name and label names: client_golang has no accessor for them.
type descriptions []*prometheus.Desc

func (d descriptions) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range d {
		ch <- desc
	}
}

func (d descriptions) Collect(ch chan<- prometheus.Metric) {
	for _, desc := range d {
		// The label count is unknown: the one NewConstMetric accepts.
		for n := 0; n <= 32; n++ {
			values := make([]string, n)
			for i := range values {
				values[i] = strconv.Itoa(i)
			}
			if m, err := prometheus.NewConstMetric(desc, prometheus.UntypedValue, 0, values...); err == nil {
				ch <- m
				break
			}
		}
	}
}

func (c catalog) addDescs(descs []*prometheus.Desc) error {
	scratch := prometheus.NewRegistry()
	if err := scratch.Register(descriptions(descs)); err != nil {
		return fmt.Errorf("describing the registry: %w", err)
	}
	families, err := scratch.Gather()
	if err != nil {
		return err
	}
	if len(families) != len(unique(descs)) {
		return fmt.Errorf("read %d of %d metric descriptions", len(families), len(unique(descs)))
	}
	for _, f := range families {
		labels := c[f.GetName()]
		if labels == nil {
			labels = map[string]bool{}
			c[f.GetName()] = labels
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
	}
	return nil
}

func unique(descs []*prometheus.Desc) map[string]bool {
	out := map[string]bool{}
	for _, d := range descs {
		out[d.String()] = true
	}
	return out
}

// addTypes adds the series a histogram or summary is exposed as.
func (c catalog) addTypes(families []*dto.MetricFamily) {
	for _, f := range families {
		base := c[f.GetName()]
		if base == nil {
			continue
		}
		with := func(extra ...string) map[string]bool {
			out := set(extra...)
			for l := range base {
				out[l] = true
			}
			return out
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			// A classic histogram has no series under its own name.
			delete(c, f.GetName())
			c[f.GetName()+"_bucket"] = with("le")
			c[f.GetName()+"_sum"] = with()
			c[f.GetName()+"_count"] = with()
		case dto.MetricType_SUMMARY:
			base["quantile"] = true
			c[f.GetName()+"_sum"] = with()
			c[f.GetName()+"_count"] = with()
		}
	}
}

func set(s ...string) map[string]bool {
	out := map[string]bool{}
	for _, x := range s {
		out[x] = true
	}
	return out
}

// The scan below reads what a PromQL expression names, by hand: the
// Prometheus parser (github.com/prometheus/prometheus/promql/parser) would
// pull the whole Prometheus server module into go.mod. It handles what the
// dashboard and alerts use (selectors, matchers, aggregations with by/
// without, vector matching, functions, Grafana variables) and refuses what
// it cannot read (label names inside strings, selectors by __name__).
var (
	stringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	grafanaRE  = regexp.MustCompile(`\$\{[^}]*\}|\$\w+|\[\[\w+\]\]`)
	rangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	selectorRE = regexp.MustCompile(`([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)`)
	groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	// tokenRE: a number or duration, or a name, with "(" if it is called.
	tokenRE = regexp.MustCompile(`[0-9][\w.]*|([A-Za-z_:][\w:]*)(\s*\()?`)
	// rangeQueryRE: a query an alert's annotation runs, and what it
	// writes of each series.
	rangeQueryRE = regexp.MustCompile(`\{\{\s*range\s+query\s+("(?:[^"\\]|\\.)*")\s*\}\}(.*?)\{\{\s*end\s*\}\}`)
	// templateRE: a label in a legend, an annotation title, or an alert's
	// $labels.
	templateRE = regexp.MustCompile(`\{\{\s*(?:\$labels\.|\.Labels\.)?(\w+)\s*\}\}|\$labels\.(\w+)`)
)

var keywords = set("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "Inf", "NaN")

// labelFunctions take label names as strings, which the scan drops.
var labelFunctions = set("label_replace", "label_join", "count_values", "sort_by_label", "sort_by_label_desc")

// check returns what in expr the code does not export, and the labels the
// expression's series can carry (for its legend).
func (c catalog) check(expr string) (problems []string, labels map[string]bool) {
	s := stringRE.ReplaceAllString(expr, `""`)
	s = grafanaRE.ReplaceAllString(s, "1m")
	s = rangeRE.ReplaceAllString(s, "")
	labels = set()
	for l := range targetLabels {
		labels[l] = true
	}
	use := func(metric string) map[string]bool {
		got, ok := c[metric]
		if _, histogram := c[metric+"_bucket"]; !ok && histogram {
			problems = append(problems, fmt.Sprintf("metric %s is a histogram: query %[1]s_bucket, %[1]s_sum or %[1]s_count", metric))
			return nil
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not exported", metric))
			return nil
		}
		for l := range got {
			labels[l] = true
		}
		return got
	}
	type matchers struct {
		metric string
		labels []string
	}
	var selected []matchers
	s = selectorRE.ReplaceAllStringFunc(s, func(sel string) string {
		m := selectorRE.FindStringSubmatch(sel)
		if m[1] == "" {
			problems = append(problems, fmt.Sprintf("selector %s names no metric: the scan cannot check it", sel))
			return " "
		}
		var ls []string
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			ls = append(ls, lm[1])
		}
		selected = append(selected, matchers{m[1], ls})
		return " "
	})
	var grouping []string
	s = groupingRE.ReplaceAllStringFunc(s, func(g string) string {
		for _, l := range strings.Split(groupingRE.FindStringSubmatch(g)[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
		return " "
	})
	for _, sel := range selected {
		got := use(sel.metric)
		for _, l := range sel.labels {
			if got != nil && !got[l] && !targetLabels[l] {
				problems = append(problems, fmt.Sprintf("metric %s has no label %s", sel.metric, l))
			}
		}
	}
	for _, t := range tokenRE.FindAllStringSubmatch(s, -1) {
		name, called := t[1], t[2] != ""
		switch {
		case name == "" || keywords[name]:
		case called && labelFunctions[name]:
			problems = append(problems, fmt.Sprintf("%s takes label names as strings, which the scan cannot check", name))
		case called:
		default:
			use(name)
		}
	}
	for _, l := range grouping {
		if !labels[l] {
			problems = append(problems, fmt.Sprintf("no series in the expression has label %s", l))
		}
	}
	return problems, labels
}

// checkTemplate reports labels a legend or annotation names that the
// expression's series cannot carry.
func checkTemplate(text string, labels map[string]bool) []string {
	var out []string
	for _, m := range templateRE.FindAllStringSubmatch(text, -1) {
		l := m[1] + m[2]
		if !labels[l] {
			out = append(out, fmt.Sprintf("%q names label %s, which the expression's series do not have", text, l))
		}
	}
	return out
}

func exported(t *testing.T) catalog {
	t.Helper()
	c, err := exportedOnce()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A query is an expression and the texts that name its labels.
type query struct {
	where     string
	expr      string
	templates []string
}

func dashboardQueries(t *testing.T) ([]query, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	var qs []query
	for _, p := range panels(dash) {
		for _, target := range list(p["targets"]) {
			if expr, _ := target["expr"].(string); expr != "" {
				legend, _ := target["legendFormat"].(string)
				qs = append(qs, query{fmt.Sprintf("panel %v %q", p["id"], p["title"]), expr, []string{legend}})
			}
		}
	}
	annotations, _ := dash["annotations"].(map[string]any)
	for _, a := range list(annotations["list"]) {
		if expr, _ := a["expr"].(string); expr != "" {
			title, _ := a["titleFormat"].(string)
			text, _ := a["textFormat"].(string)
			qs = append(qs, query{fmt.Sprintf("annotation %q", a["name"]), expr, []string{title, text}})
		}
	}
	return qs, dash
}

func alertQueries(t *testing.T) []query {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name     string
			Interval string
			Rules    []struct {
				Alert         string
				Record        string
				Expr          string
				For           string
				KeepFiringFor string `json:"keep_firing_for"`
				Labels        map[string]string
				Annotations   map[string]string
			}
		}
	}
	if err := yaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var qs []query
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			q := query{where: "alert " + r.Alert + r.Record, expr: r.Expr}
			for _, m := range []map[string]string{r.Labels, r.Annotations} {
				for _, v := range m {
					// A {{ range query "EXPR" }}...{{ end }} in an
					// annotation names the labels of EXPR's series.
					for _, m := range rangeQueryRE.FindAllStringSubmatch(v, -1) {
						expr, err := strconv.Unquote(m[1])
						if err != nil {
							t.Fatalf("alert %s: %s: %v", r.Alert, m[1], err)
						}
						qs = append(qs, query{where: "alert " + r.Alert + " annotation query", expr: expr, templates: []string{m[2]}})
					}
					q.templates = append(q.templates, rangeQueryRE.ReplaceAllString(v, ""))
				}
			}
			qs = append(qs, q)
		}
	}
	return qs
}

func checkQueries(t *testing.T, c catalog, qs []query) {
	t.Helper()
	if len(qs) == 0 {
		t.Fatal("no queries found")
	}
	for _, q := range qs {
		problems, labels := c.check(q.expr)
		for _, tmpl := range q.templates {
			problems = append(problems, checkTemplate(tmpl, labels)...)
		}
		for _, p := range problems {
			t.Errorf("%s: %s\n\texpr: %s", q.where, p, q.expr)
		}
	}
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	qs, _ := dashboardQueries(t)
	checkQueries(t, exported(t), qs)
}

func TestAlertRulesQueryExportedMetrics(t *testing.T) {
	checkQueries(t, exported(t), alertQueries(t))
}

// panels lists the dashboard's panels, those inside collapsed rows too.
func panels(container map[string]any) []map[string]any {
	var out []map[string]any
	for _, p := range list(container["panels"]) {
		out = append(out, p)
		out = append(out, panels(p)...)
	}
	return out
}

func list(v any) []map[string]any {
	items, _ := v.([]any)
	var out []map[string]any
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func TestDashboardShape(t *testing.T) {
	_, dash := dashboardQueries(t)
	for key, want := range map[string]any{"uid": "rampart", "title": "Rampart", "refresh": "30s"} {
		if dash[key] != want {
			t.Errorf("%s is %v, want %v", key, dash[key], want)
		}
	}
	if v, _ := dash["schemaVersion"].(float64); v < 39 {
		t.Errorf("schemaVersion %v, want 39 or later", dash["schemaVersion"])
	}
	if tr, _ := dash["time"].(map[string]any); tr["from"] != "now-1h" || tr["to"] != "now" {
		t.Errorf("time is %v, want the last hour", dash["time"])
	}
	templating, _ := dash["templating"].(map[string]any)
	if !slices.ContainsFunc(list(templating["list"]), func(v map[string]any) bool {
		return v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"
	}) {
		t.Error("no template variable datasource of type datasource, query prometheus")
	}

	ids := map[float64]string{}
	for _, p := range panels(dash) {
		title, _ := p["title"].(string)
		id, ok := p["id"].(float64)
		if !ok {
			t.Errorf("panel %q has no id", title)
		} else if other, dup := ids[id]; dup {
			t.Errorf("panels %q and %q share id %v", other, title, id)
		}
		ids[id] = title
		if p["type"] == "row" {
			continue // a row queries nothing
		}
		if !isTemplateDatasource(p["datasource"]) {
			t.Errorf("panel %q: datasource %v, want ${datasource}", title, p["datasource"])
		}
		targets := list(p["targets"])
		if len(targets) == 0 {
			t.Errorf("panel %q has no query", title)
		}
		for _, target := range targets {
			if ds, set := target["datasource"]; set && !isTemplateDatasource(ds) {
				t.Errorf("panel %q query %v: datasource %v, want ${datasource}", title, target["refId"], ds)
			}
		}
	}
	// Anywhere else (annotations included), no datasource is hard-coded.
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if k == "datasource" && !isTemplateDatasource(v[k]) {
					t.Errorf("%s.datasource is %v, want ${datasource}", path, v[k])
				}
				walk(path+"."+k, v[k])
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		}
	}
	walk("dashboard", dash)
}

func isTemplateDatasource(v any) bool {
	switch ds := v.(type) {
	case string:
		return ds == "${datasource}"
	case map[string]any:
		return ds["uid"] == "${datasource}" && (ds["type"] == nil || ds["type"] == "prometheus")
	}
	return false
}

// TestScanFindsWhatIsNotExported shows the checks above can fail: each
// case is a mistake a dashboard or alert could make.
func TestScanFindsWhatIsNotExported(t *testing.T) {
	c := exported(t)
	for _, tc := range []struct {
		expr, legend string
		want         []string
	}{
		{expr: `sum by (rule, resource) (rate(rampart_admission_denials_total[$__rate_interval]))`, legend: "{{rule}}"},
		{expr: `histogram_quantile(0.99, sum by (le, verb) (rate(rampart_gateway_request_duration_seconds_bucket[5m])))`},
		{expr: `max by (policy) (rampart_gateway_breaker_state{state!="Closed", instance=~"$gw"}) > 0`},
		{expr: `rampart_flowcontrol_breaker_open == 1`, legend: "{{name}} on {{pod}}"},
		{expr: `rate(rampart_admission_denial_total[5m])`, want: []string{"metric rampart_admission_denial_total is not exported"}},
		{expr: `rampart_gateway_breaker_state{policy="x", status="Open"}`, want: []string{"metric rampart_gateway_breaker_state has no label status"}},
		{expr: `sum by (reason, verb) (rate(rampart_gateway_rejections_total[5m]))`, want: []string{"no series in the expression has label verb"}},
		{expr: `sum(rate(rampart_gateway_rejections_total[5m])) by (policy) / on (verb) sum(rampart_gateway_requests_in_flight)`,
			want: []string{"no series in the expression has label verb"}},
		{expr: `rampart_gateway_request_duration_seconds{verb="get"}`,
			want: []string{"metric rampart_gateway_request_duration_seconds is a histogram: query rampart_gateway_request_duration_seconds_bucket, rampart_gateway_request_duration_seconds_sum or rampart_gateway_request_duration_seconds_count"}},
		{expr: `rate(rampart_admission_denials_total_bucket[5m])`, want: []string{"metric rampart_admission_denials_total_bucket is not exported"}},
		{expr: `rate(controller_runtime_webhook_latency_seconds_count[5m])`, legend: "{{path}}",
			want: []string{`"{{path}}" names label path, which the expression's series do not have`}},
		{expr: `increase(rampart_flowcontrol_trips_total[5m]) > 0`, legend: "Breaker of {{ $labels.policy }} tripped",
			want: []string{`"Breaker of {{ $labels.policy }} tripped" names label policy, which the expression's series do not have`}},
		{expr: `label_replace(rampart_gateway_breaker_state, "p", "$1", "policy", "(.*)")`,
			want: []string{"label_replace takes label names as strings, which the scan cannot check"}},
	} {
		problems, labels := c.check(tc.expr)
		problems = append(problems, checkTemplate(tc.legend, labels)...)
		if !slices.Equal(problems, tc.want) {
			t.Errorf("%s (legend %q): found %q, want %q", tc.expr, tc.legend, problems, tc.want)
		}
	}
}
