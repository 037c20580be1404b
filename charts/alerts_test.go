package charts_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	chartfiles "github.com/rampart-io/rampart/charts/rampart"
)

// sample is one series of a query's result, as Prometheus's templates see
// it (template.sample: .Labels, .Value).
type sample struct {
	Labels map[string]string
	Value  float64
}

// promTemplateData is what Prometheus executes an alert's annotation with
// (rules.AlertingRule: .Labels, .ExternalLabels, .ExternalURL, .Value).
type promTemplateData struct {
	Labels         map[string]string
	ExternalLabels map[string]string
	ExternalURL    string
	Value          float64
}

// promDefs are the variables Prometheus defines before an annotation
// (rules/alerting.go).
const promDefs = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"

// promFuncs stand in for the functions Prometheus's templates have
// (template/template.go), without its module: query answers from
// results, the others format as Prometheus does closely enough to read.
func promFuncs(results map[string][]sample, queried *[]string) template.FuncMap {
	humanize := func(unit float64, suffixes ...string) func(v float64) string {
		return func(v float64) string {
			i := 0
			for v >= unit && i < len(suffixes)-1 {
				v /= unit
				i++
			}
			return fmt.Sprintf("%.4g%s", v, suffixes[i])
		}
	}
	return template.FuncMap{
		"query": func(q string) ([]sample, error) {
			*queried = append(*queried, q)
			r, ok := results[q]
			if !ok {
				return nil, fmt.Errorf("no fake result for query %q", q)
			}
			return r, nil
		},
		"first": func(v []sample) (sample, error) {
			if len(v) == 0 {
				return sample{}, fmt.Errorf("first() called on vector with no elements")
			}
			return v[0], nil
		},
		"label":              func(l string, s sample) string { return s.Labels[l] },
		"value":              func(s sample) float64 { return s.Value },
		"strvalue":           func(s sample) string { return s.Labels["__value__"] },
		"args":               func(args ...any) map[string]any { return map[string]any{} },
		"reReplaceAll":       func(pattern, repl, text string) string { return text },
		"safeHtml":           func(text string) string { return text },
		"match":              func(pattern, s string) (bool, error) { return false, nil },
		"title":              strings.Title, //nolint:staticcheck // as Prometheus does
		"toUpper":            strings.ToUpper,
		"toLower":            strings.ToLower,
		"graphLink":          func(expr string) string { return "/graph?g0.expr=" + expr },
		"tableLink":          func(expr string) string { return "/graph?g0.expr=" + expr },
		"sortByLabel":        func(label string, v []sample) []sample { return v },
		"humanize":           humanize(1000, "", "k", "M", "G", "T", "P", "E", "Z", "Y"),
		"humanize1024":       humanize(1024, "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"),
		"humanizeDuration":   func(v float64) string { return fmt.Sprintf("%.4gs", v) },
		"humanizePercentage": func(v float64) string { return fmt.Sprintf("%.4g%%", v*100) },
		"humanizeTimestamp":  func(v float64) string { return fmt.Sprint(v) },
		"toTime":             func(v float64) float64 { return v },
		"toDuration":         func(v float64) float64 { return v },
		"pathPrefix":         func() string { return "" },
		"externalURL":        func() string { return "http://prometheus.example" },
		"parseDuration":      func(s string) (float64, error) { return 0, nil },
		"stripPort":          func(s string) string { return s },
		"stripDomain":        func(s string) string { return s },
		"urlQueryEscape":     func(s string) string { return s },
		"now":                func() float64 { return 0 },
	}
}

// TestAlertDescriptionsNameTheKeys renders the chart's PrometheusRule and
// runs every alert's annotations as Prometheus would (text/template with
// its functions, a fake query answering two prefixes): each parses and
// runs, the rendered text is the alerts file's verbatim (Helm does not
// read the {{ }} of files/alerts.yaml), and the etcd space alerts name
// both prefixes and their sizes.
func TestAlertDescriptionsNameTheKeys(t *testing.T) {
	rule := find(t, render(t, "--set", "monitoring.prometheusRule.enabled=true"), "PrometheusRule", "rampart")
	groups, _, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if err != nil || len(groups) == 0 {
		t.Fatalf("PrometheusRule rampart has no spec.groups: %v", err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(chartfiles.Alerts, &file); err != nil {
		t.Fatal(err)
	}
	inFile := map[string]map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			inFile[r.Alert] = r.Annotations
		}
	}
	const top = "topk(3, rampart_etcd_space_written_bytes)"
	results := map[string][]sample{top: {
		{Labels: map[string]string{"prefix": "/registry/configmaps/spam/"}, Value: 600 << 20},
		{Labels: map[string]string{"prefix": "/registry/events/app/"}, Value: 40 << 20},
	}}
	data := promTemplateData{Labels: map[string]string{"name": "web", "policy": "p", "namespace": "ns", "member": "etcd-0"}, Value: 1}
	described := map[string]string{}
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			alert, _ := r["alert"].(string)
			annotations, _, _ := unstructured.NestedStringMap(r, "annotations")
			for key, text := range annotations {
				if alert != "" && inFile[alert][key] != text {
					t.Errorf("alert %s %s renders as\n%q\nnot as files/alerts.yaml has it\n%q", alert, key, text, inFile[alert][key])
				}
				var queried []string
				tmpl, err := template.New(alert + "." + key).Funcs(promFuncs(results, &queried)).Option("missingkey=zero").Parse(promDefs + text)
				if err != nil {
					t.Errorf("alert %s %s does not parse as a Prometheus template: %v", alert, key, err)
					continue
				}
				var out strings.Builder
				if err := tmpl.Execute(&out, data); err != nil {
					t.Errorf("alert %s %s does not run as a Prometheus template: %v", alert, key, err)
					continue
				}
				if key == "description" {
					described[alert] = out.String()
				}
			}
		}
	}
	for _, alert := range []string{"RampartEtcdSpaceLow", "RampartEtcdNoSpace"} {
		d, ok := described[alert]
		if !ok {
			t.Errorf("the PrometheusRule has no alert %s with a description", alert)
			continue
		}
		for _, want := range []string{"/registry/configmaps/spam/ (600MiB)", "/registry/events/app/ (40MiB)", "rampart etcd space recover"} {
			if !strings.Contains(d, want) {
				t.Errorf("alert %s's description does not name %q:\n%s", alert, want, d)
			}
		}
		if strings.Contains(d, "{{") || slices.Contains(strings.Fields(d), "<no") {
			t.Errorf("alert %s's description kept template text or missed a value:\n%s", alert, d)
		}
	}
}
