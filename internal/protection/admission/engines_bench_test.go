package admission_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// BenchmarkDeleteLatencyByEngine measures, in one interleaved run through
// the real API server, the latency of a dry-run DELETE of four ConfigMaps:
// one no rule reaches, one a compiled policy (ValidatingAdmissionPolicy)
// denies, one Rampart's webhook denies (rampart.io/protection=Always), and
// one a bare ValidatingAdmissionPolicy denies with a fixed message and no
// selector: the floor of any denial by the API server's policies, against
// which the compiled policy's own cost (its selectors and message) shows.
// Each iteration sends the four in a random order, so the machine's noise
// falls on all alike. It reports each one's p50 and p99 and the ratios to
// no rule. Run:
//
//	go test -run '^$' -bench DeleteLatencyByEngine -benchtime 500x ./internal/protection/admission/
func BenchmarkDeleteLatencyByEngine(b *testing.B) {
	env := clustertest.Get(b)
	ctx := context.Background()
	ns := env.Namespace(b)
	objects := map[string]map[string]string{
		"norule":   nil,
		"compiled": {"bench-engine": "compiled"},
		"webhook":  {v1alpha1.LabelProtection: string(v1alpha1.ProtectionAlways)},
		"floor":    {"bench-engine": "floor"},
	}
	for name, labels := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Only this policy is compiled: the label stays the webhook's.
	p := v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + ns}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:      []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		ObjectSelector: &metav1.LabelSelector{MatchLabels: objects["compiled"]},
		Protection:     v1alpha1.ProtectionAlways,
	}}
	cs := compiled.FromPolicy(&p, compiled.Options{OwnNamespace: "rampart-system"})
	floor := compiled.FromPolicy(&p, compiled.Options{})[0]
	floor.Policy.Name = "floor-" + ns
	floor.Binding.Name, floor.Binding.Spec.PolicyName = floor.Policy.Name, floor.Policy.Name
	floor.Policy.Spec.Variables, floor.Policy.Spec.MatchConstraints.NamespaceSelector = nil, nil
	floor.Policy.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: objects["floor"]}
	floor.Policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false", Message: "denied", Reason: ptr.To(metav1.StatusReasonForbidden)}}
	vaps := env.Client.AdmissionregistrationV1()
	for _, c := range append(cs, floor) {
		if _, err := vaps.ValidatingAdmissionPolicies().Create(ctx, c.Policy, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := vaps.ValidatingAdmissionPolicyBindings().Create(ctx, c.Binding, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = vaps.ValidatingAdmissionPolicyBindings().Delete(ctx, c.Binding.Name, metav1.DeleteOptions{})
			_ = vaps.ValidatingAdmissionPolicies().Delete(ctx, c.Policy.Name, metav1.DeleteOptions{})
		})
	}
	dryDelete := func(name string) error {
		return env.Client.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	for _, name := range []string{"compiled", "floor"} {
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return apierrors.IsForbidden(dryDelete(name)), nil
		}); err != nil {
			b.Fatalf("the %s policy was never enforced", name)
		}
	}
	want := map[string]bool{"norule": false, "compiled": true, "webhook": true, "floor": true} // denied
	took := map[string][]time.Duration{}
	names := []string{"norule", "compiled", "webhook", "floor"}
	b.ResetTimer()
	for range b.N {
		rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		for _, name := range names {
			start := time.Now()
			err := dryDelete(name)
			took[name] = append(took[name], time.Since(start))
			if denied := apierrors.IsForbidden(err); denied != want[name] || (!denied && err != nil) {
				b.Fatalf("%s: %v", name, err)
			}
		}
	}
	b.StopTimer()
	pct := func(name string, q float64) float64 {
		d := slices.Clone(took[name])
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	for _, name := range names {
		b.ReportMetric(pct(name, 0.5), name+"-p50-ms")
		b.ReportMetric(pct(name, 0.99), name+"-p99-ms")
	}
	b.ReportMetric(pct("compiled", 0.5)/pct("norule", 0.5), "compiled/norule-p50")
	b.ReportMetric(pct("webhook", 0.5)/pct("norule", 0.5), "webhook/norule-p50")
	b.ReportMetric(pct("floor", 0.5)/pct("norule", 0.5), "floor/norule-p50")
	b.ReportMetric(0, "ns/op")
}
