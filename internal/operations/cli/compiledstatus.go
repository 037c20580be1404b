package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// vapChecks is the API server's own count of ValidatingAdmissionPolicy
// evaluations, by policy and by what came of them (deny, warn, allow).
const vapChecks = "apiserver_validating_admission_policy_check_total"

// printCompiled lists the compiled policies and how often each denied or
// warned. A compiled policy calls no webhook, so Rampart sees none of its
// requests: the counts are the API server's own metric, which needs no
// audit configuration and counts every evaluation, but is kept per API
// server process (the one this client reached) from its start. Prometheus
// scraping every API server sums them.
func printCompiled(ctx context.Context, w io.Writer, cs kubernetes.Interface) error {
	sel := metav1.ListOptions{LabelSelector: compiled.LabelManagedBy + "=" + compiled.ManagedBy}
	policies, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, sel)
	if err != nil {
		return err
	}
	bindings, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		return err
	}
	actions := map[string]string{}
	for _, b := range bindings.Items {
		var a []string
		for _, v := range b.Spec.ValidationActions {
			a = append(a, string(v))
		}
		actions[b.Spec.PolicyName] = strings.Join(a, ",")
	}
	counts, countErr := compiledCounts(ctx, cs)
	fmt.Fprintln(w, "NAME\tFROM\tACTION\tDENIED\tWARNED")
	shown := 0
	for _, p := range policies.Items {
		if p.Labels[compiled.LabelSource] == "" {
			continue // the manager's probe, which holds no rule
		}
		shown++
		denied, warned := "?", "?"
		if countErr == nil {
			denied, warned = fmt.Sprint(counts[p.Name]["deny"]), fmt.Sprint(counts[p.Name]["warn"])
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Labels[compiled.LabelSource], dash(actions[p.Name]), denied, warned)
	}
	switch {
	case shown == 0:
		fmt.Fprintln(w, "(none: rampart export policies | kubectl apply -f - compiles the static rules)")
	case countErr != nil:
		fmt.Fprintf(w, "(counts unknown: cannot read the API server's %s: %v)\n", vapChecks, countErr)
	default:
		fmt.Fprintln(w, "(counts: the API server this client reached, since it started; these denials make no Event)")
	}
	return nil
}

// compiledCounts reads vapChecks from the API server's /metrics.
func compiledCounts(ctx context.Context, cs kubernetes.Interface) (map[string]map[string]int64, error) {
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]int64{}
	f, ok := families[vapChecks]
	if !ok {
		return out, nil // no policy evaluated yet
	}
	for _, m := range f.GetMetric() {
		var policy, action string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "policy":
				policy = l.GetValue()
			case "enforcement_action":
				action = l.GetValue()
			}
		}
		if out[policy] == nil {
			out[policy] = map[string]int64{}
		}
		out[policy][action] += int64(m.GetCounter().GetValue())
	}
	return out, nil
}
