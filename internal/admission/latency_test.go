package admission_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
)

// BenchmarkDeleteThroughAPIServer measures the latency a client sees for a
// DELETE through the real API server: of an object the webhook never sees
// (no Rampart label: the API server's objectSelector filters it), of a
// protected object the webhook judges and admits (Cascading, nothing
// depends on it), and of one it denies (Always). Each iteration deletes one
// of each, interleaved, so that the noise of a shared machine falls on all
// three alike. It reports p50 and p99 per case; hack/delete-latency.sh
// prints the ratios.
func BenchmarkDeleteThroughAPIServer(b *testing.B) {
	env := clustertest.Get(b)
	ctx := context.Background()
	ns := env.Namespace(b)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	cases := []struct {
		name   string
		labels map[string]string
		denied bool
	}{
		{"not-called", nil, false},
		{"admits", map[string]string{protectionLabel: "Cascading"}, false},
		{"denies", map[string]string{protectionLabel: "Always"}, true},
	}
	lat := make([][]time.Duration, len(cases))
	i := 0
	for b.Loop() {
		for c, cs := range cases {
			name := fmt.Sprintf("%s-%d", cs.name, i)
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: cs.labels}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			err := cms.Delete(ctx, name, metav1.DeleteOptions{})
			lat[c] = append(lat[c], time.Since(start))
			if (err != nil) != cs.denied {
				b.Fatalf("delete of %s: %v", name, err)
			}
		}
		i++
	}
	for c, cs := range cases {
		l := lat[c]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2].Microseconds()), cs.name+"-p50-us")
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), cs.name+"-p99-us")
	}
}
