package quotawatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/internal/operations/quota"
)

type pods map[string][]quota.Pod

func (p pods) PodsByNamespace() map[string][]quota.Pod { return p }
func (pods) HasSynced() bool                           { return true }

func running(n int) []quota.Pod {
	var out []quota.Pod
	for range n {
		out = append(out, quota.Summarize(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}))
	}
	return out
}

// The peak survives a restart of the manager (a new Recorder reading the
// ConfigMap), and writes are rare: not on every sample.
func TestRecorderPeaksSurviveRestart(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	src := pods{"shop": running(6)}
	r := &Recorder{Client: c, Reader: c, Pods: src, Namespace: "rampart-system", Clock: clk}
	if err := r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	stored := func() *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "rampart-system", Name: quota.PeaksConfigMap}, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	first := stored().ResourceVersion
	// The surge ends; a higher peak meanwhile is not written at once.
	src["shop"] = running(9)
	clk.Step(DefaultEvery)
	if err := r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	src["shop"] = running(2)
	clk.Step(DefaultEvery)
	if err := r.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if rv := stored().ResourceVersion; rv != first {
		t.Errorf("written again %v after the first write; want at most every %v", 2*DefaultEvery, DefaultWriteEvery)
	}
	// Shutdown writes what is unwritten; a new leader carries on.
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	again := &Recorder{Client: c, Reader: c, Pods: src, Namespace: "rampart-system", Clock: clk}
	if err := again.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := quota.DecodePeaks(stored().Data[quota.PeaksKey])
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Peak("shop")[quota.Pods]; got.Value() != 9 {
		t.Errorf("stored peak %s pods, want the surge's 9", got.String())
	}
	if got := again.peaks.Peak("shop")[quota.Pods]; got.Value() != 9 {
		t.Errorf("peak after restart %s pods, want 9", got.String())
	}
}

func TestGauges(t *testing.T) {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "rampart"},
		Status: corev1.ResourceQuotaStatus{
			Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")},
			Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("8")}}}
	g := NewGauges(fake.NewClientBuilder().WithObjects(q).Build())
	want := `
# HELP rampart_quota_headroom Hard minus used of a ResourceQuota's resource, in its base unit (objects, cores, bytes).
# TYPE rampart_quota_headroom gauge
rampart_quota_headroom{namespace="shop",resource="pods",resourcequota="rampart"} 2
# HELP rampart_quota_used_ratio Used over hard of a ResourceQuota's resource (1 = at the limit).
# TYPE rampart_quota_used_ratio gauge
rampart_quota_used_ratio{namespace="shop",resource="pods",resourcequota="rampart"} 0.8
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
