package quota

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func sameList(t *testing.T, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for n, w := range want {
		if g, ok := got[n]; !ok || g.Cmp(w) != 0 {
			t.Errorf("%s: got %s, want %s", n, g.String(), w.String())
		}
	}
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peak   corev1.ResourceList
		margin float64
		want   corev1.ResourceList
	}{
		{"default margin on counts rounds up to whole objects", rl("pods", "10", "count/configmaps", "3"), DefaultMargin, rl("pods", "12", "count/configmaps", "4")},
		{"cpu rounds up to 100m", rl("requests.cpu", "1", "limits.cpu", "250m"), DefaultMargin, rl("requests.cpu", "1200m", "limits.cpu", "300m")},
		{"memory rounds up to 64Mi", rl("requests.memory", "1Gi", "limits.memory", "100Mi"), DefaultMargin, rl("requests.memory", "1280Mi", "limits.memory", "128Mi")},
		{"zero use gets the floors", rl("pods", "0", "requests.cpu", "0", "requests.memory", "0", "count/secrets", "0"), DefaultMargin,
			rl("pods", "1", "requests.cpu", "100m", "requests.memory", "128Mi", "count/secrets", "1")},
		{"no margin keeps an exact peak", rl("pods", "7", "requests.cpu", "700m", "requests.memory", "640Mi"), 0, rl("pods", "7", "requests.cpu", "700m", "requests.memory", "640Mi")},
		{"a larger margin", rl("pods", "10", "limits.memory", "2Gi"), 0.5, rl("pods", "15", "limits.memory", "3Gi")},
		{"a negative margin counts as none", rl("pods", "10"), -0.5, rl("pods", "10")},
		{"a fraction of one object still rounds up", rl("pods", "1"), 0.01, rl("pods", "2")},
	} {
		t.Run(tc.name, func(t *testing.T) { sameList(t, Size(tc.peak, tc.margin), tc.want) })
	}
}

func pod(phase corev1.PodPhase, containers ...corev1.ResourceRequirements) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
	for _, r := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: r})
	}
	return p
}

func req(kv ...string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: rl(kv...)}
}

func TestPodUse(t *testing.T) {
	d := Defaults{Request: rl("cpu", "100m", "memory", "128Mi"), Limit: rl("cpu", "500m", "memory", "512Mi")}
	both := corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "256Mi"), Limits: rl("cpu", "1", "memory", "1Gi")}
	limitOnly := corev1.ResourceRequirements{Limits: rl("cpu", "300m", "memory", "300Mi")}
	withInit := pod(corev1.PodRunning, both)
	withInit.Spec.InitContainers = []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "64Mi"), Limits: rl("cpu", "2", "memory", "64Mi")}}}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want corev1.ResourceList
	}{
		{"no pods", nil, rl("pods", "0", "requests.cpu", "0", "requests.memory", "0", "limits.cpu", "0", "limits.memory", "0")},
		{"declared requests and limits", []*corev1.Pod{pod(corev1.PodRunning, both), pod(corev1.PodPending, both)},
			rl("pods", "2", "requests.cpu", "400m", "requests.memory", "512Mi", "limits.cpu", "2", "limits.memory", "2Gi")},
		{"a pod without requests counts with the LimitRange defaults", []*corev1.Pod{pod(corev1.PodRunning, corev1.ResourceRequirements{})},
			rl("pods", "1", "requests.cpu", "100m", "requests.memory", "128Mi", "limits.cpu", "500m", "limits.memory", "512Mi")},
		{"a limit without request is the request", []*corev1.Pod{pod(corev1.PodRunning, limitOnly)},
			rl("pods", "1", "requests.cpu", "300m", "requests.memory", "300Mi", "limits.cpu", "300m", "limits.memory", "300Mi")},
		{"finished pods do not count", []*corev1.Pod{pod(corev1.PodSucceeded, both), pod(corev1.PodFailed, both), pod(corev1.PodRunning, req("cpu", "1", "memory", "1Gi"))},
			rl("pods", "1", "requests.cpu", "1", "requests.memory", "1Gi", "limits.cpu", "1", "limits.memory", "1Gi")},
		{"the largest init container wins when larger", []*corev1.Pod{withInit},
			rl("pods", "1", "requests.cpu", "2", "requests.memory", "256Mi", "limits.cpu", "2", "limits.memory", "1Gi")},
	} {
		t.Run(tc.name, func(t *testing.T) { sameList(t, PodUse(SummarizeAll(tc.pods), d), tc.want) })
	}
}

func TestLimitDefaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pods       []*corev1.Pod
		req, limit corev1.ResourceList
	}{
		{"nothing declared: the fallbacks", []*corev1.Pod{pod(corev1.PodRunning, corev1.ResourceRequirements{})},
			rl("cpu", "100m", "memory", "128Mi"), rl("cpu", "500m", "memory", "512Mi")},
		{"the mean of declared values, rounded up", []*corev1.Pod{pod(corev1.PodRunning, req("cpu", "150m", "memory", "100Mi"), req("cpu", "250m", "memory", "300Mi"))},
			rl("cpu", "200m", "memory", "256Mi"), rl("cpu", "500m", "memory", "512Mi")},
		{"a small mean is not raised to the quota's floor", []*corev1.Pod{pod(corev1.PodRunning, req("cpu", "100m", "memory", "64Mi"))},
			rl("cpu", "100m", "memory", "64Mi"), rl("cpu", "500m", "memory", "512Mi")},
		{"a limit never below the request", []*corev1.Pod{pod(corev1.PodRunning, req("cpu", "2", "memory", "2Gi"))},
			rl("cpu", "2", "memory", "2Gi"), rl("cpu", "2", "memory", "2Gi")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := LimitDefaults(SummarizeAll(tc.pods))
			sameList(t, d.Request, tc.req)
			sameList(t, d.Limit, tc.limit)
		})
	}
}

// A plan for a namespace with known use: pods without requests are
// covered by the LimitRange defaults and counted with them.
func TestPlanFor(t *testing.T) {
	pods := []*corev1.Pod{
		pod(corev1.PodRunning, req("cpu", "500m", "memory", "512Mi")),
		pod(corev1.PodRunning, req("cpu", "500m", "memory", "512Mi")),
		pod(corev1.PodRunning, corev1.ResourceRequirements{}), // no requests
	}
	d := LimitDefaults(SummarizeAll(pods))
	current := PodUse(SummarizeAll(pods), d)
	current["count/configmaps"] = resource.MustParse("5")
	p := PlanFor(Observed{Namespace: "shop", Current: current, Defaults: d}, DefaultMargin)
	// Requests: 2×500m + the default 500m = 1500m, ×1.2 = 1800m;
	// memory 1536Mi ×1.2 = 1843.2Mi, up to the next 64Mi: 1856Mi.
	sameList(t, p.Quota.Spec.Hard, rl("pods", "4", "requests.cpu", "1800m", "requests.memory", "1856Mi",
		"limits.cpu", "1800m", "limits.memory", "1856Mi", "count/configmaps", "6"))
	if got := p.LimitRange.Spec.Limits[0].DefaultRequest[corev1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("default request %s, want the declared mean 500m", got.String())
	}
	if p.FromPeak {
		t.Error("no peak given, yet FromPeak")
	}
	// A tracked peak larger than today's use sizes the quota.
	p = PlanFor(Observed{Namespace: "shop", Current: current, Peak: rl("pods", "10"), Defaults: d}, DefaultMargin)
	if got := p.Quota.Spec.Hard[Pods]; got.Value() != 12 || !p.FromPeak {
		t.Errorf("pods %s from peak %v, want 12 from the peak", got.String(), p.FromPeak)
	}
}

func TestDiff(t *testing.T) {
	in := []corev1.ResourceQuota{{Spec: corev1.ResourceQuotaSpec{Hard: rl("pods", "10", "requests.cpu", "2", "services", "5")}}}
	got := Diff(rl("pods", "12", "requests.cpu", "2", "count/secrets", "4"), in)
	want := []string{"+ count/secrets: 4", "~ pods: 10 -> 12", "  services: 5 (kept: not planned)"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestClosest(t *testing.T) {
	q := func(ns string, used, hard corev1.ResourceList) corev1.ResourceQuota {
		return corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "q"}, Status: corev1.ResourceQuotaStatus{Used: used, Hard: hard}}
	}
	got := Closest([]corev1.ResourceQuota{
		q("a", rl("pods", "5", "requests.cpu", "900m"), rl("pods", "10", "requests.cpu", "1")),
		q("b", rl("pods", "10"), rl("pods", "10")),
		q("c", rl("pods", "1"), rl("pods", "10")),
	}, 2)
	if len(got) != 2 || got[0].Namespace != "b" || got[0].Value != 1 || got[1].Namespace != "a" || got[1].Resource != RequestsCPU {
		t.Fatalf("got %+v", got)
	}
	if h := got[1].Headroom(); h < 0.099 || h > 0.101 {
		t.Errorf("headroom %v cores, want 0.1", h)
	}
}

func TestPeaks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &Peaks{Window: 2 * time.Hour}
	if !p.Observe(t0, map[string]corev1.ResourceList{"a": rl("pods", "5")}) {
		t.Fatal("first sample not reported as a change")
	}
	if p.Observe(t0.Add(time.Minute), map[string]corev1.ResourceList{"a": rl("pods", "3")}) {
		t.Error("a lower sample reported as a change")
	}
	if !p.Observe(t0.Add(2*time.Minute), map[string]corev1.ResourceList{"a": rl("pods", "8")}) {
		t.Error("a new peak not reported")
	}
	// Rotated once: the peak is still in the window.
	p.Observe(t0.Add(61*time.Minute), map[string]corev1.ResourceList{"a": rl("pods", "1")})
	if got := p.Peak("a")[Pods]; got.Value() != 8 {
		t.Errorf("peak after one rotation %s, want 8", got.String())
	}
	// Rotated twice: it has left the window.
	p.Observe(t0.Add(122*time.Minute), map[string]corev1.ResourceList{"a": rl("pods", "1")})
	if got := p.Peak("a")[Pods]; got.Value() != 1 {
		t.Errorf("peak after the window %s, want 1", got.String())
	}
	if p.Peak("unseen") != nil {
		t.Error("a peak for a namespace never seen")
	}
	// Survives its stored form.
	s, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodePeaks(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Peak("a")[Pods]; got.Value() != 1 {
		t.Errorf("decoded peak %s", got.String())
	}
	// Bounded: namespaces beyond MaxNamespaces are not held.
	many := map[string]corev1.ResourceList{}
	for i := range MaxNamespaces + 10 {
		many[time.Duration(i).String()] = rl("pods", "1", "requests.cpu", "100m", "requests.memory", "128Mi", "limits.cpu", "500m", "limits.memory", "512Mi")
	}
	big := &Peaks{}
	big.Observe(t0, many)
	if len(big.Current) != MaxNamespaces {
		t.Errorf("held %d namespaces, want %d", len(big.Current), MaxNamespaces)
	}
	if s, _ := big.Encode(); len(s) > 900<<10 {
		t.Errorf("encoded %d bytes, too near a ConfigMap's 1 MiB", len(s))
	}
}
