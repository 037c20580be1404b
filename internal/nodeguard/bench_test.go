package nodeguard

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"context"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkPassThrough times CRI calls made directly to the fake runtime
// and through the guard, alternating in one run so that both see the same
// machine, and reports each p50 and p90 and the ratio of the p50s:
//
//	go test -run XXX -bench PassThrough -benchtime 5000x ./internal/nodeguard/
//
// Version and PodSandboxStatus are the smallest calls; ListContainers of
// 100 containers is a kubelet relist; StopContainer of an unprotected pod
// is a judged call (the guard asks the runtime about it first).
func BenchmarkPassThrough(b *testing.B) {
	r := newRig(b, rigOptions{})
	var sb string
	var unprotected []string
	for i := range 20 {
		name := fmt.Sprintf("web-%d", i)
		cs := []fakeContainer{{"a", "a:1"}, {"b", "b:1"}, {"c", "c:1"}, {"d", "d:1"}, {"e", "e:1"}}
		s, ids := r.rt.addPod(fmt.Sprintf("u%d", i), "shop", name, false, cs...)
		sb, unprotected = s, ids
	}
	r.rt.stopKeepsRunning = true
	direct := runtimeapi.NewRuntimeServiceClient(r.direct)
	ctx := context.Background()
	alternateEach(b, direct, r.kubelet, []criCall{
		{"Version", version(ctx)},
		{"PodSandboxStatus", sandboxStatus(ctx, sb)},
		{"ListContainers-100", listContainers(ctx)},
		{"StopContainer-judged", func(c runtimeapi.RuntimeServiceClient) error {
			_, err := c.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: unprotected[0]})
			return err
		}},
	})
}

// criCall is one CRI call a benchmark times, by name.
type criCall struct {
	name string
	call func(runtimeapi.RuntimeServiceClient) error
}

func version(ctx context.Context) func(runtimeapi.RuntimeServiceClient) error {
	return func(c runtimeapi.RuntimeServiceClient) error {
		_, err := c.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}
}

func sandboxStatus(ctx context.Context, id string) func(runtimeapi.RuntimeServiceClient) error {
	return func(c runtimeapi.RuntimeServiceClient) error {
		_, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		return err
	}
}

func listContainers(ctx context.Context) func(runtimeapi.RuntimeServiceClient) error {
	return func(c runtimeapi.RuntimeServiceClient) error {
		_, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		return err
	}
}

// alternateEach runs alternate for each call, as a sub-benchmark.
func alternateEach(b *testing.B, direct, guarded runtimeapi.RuntimeServiceClient, calls []criCall) {
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) { alternate(b, direct, guarded, c.call) })
	}
}

// alternate times call made directly and through the guard, alternating
// which goes first, and reports each p50 and p90 and the ratio of the
// p50s.
func alternate(b *testing.B, direct, guarded runtimeapi.RuntimeServiceClient, call func(runtimeapi.RuntimeServiceClient) error) {
	for range 200 { // warm both connections and the pools
		if err := call(direct); err != nil {
			b.Fatal(err)
		}
		if err := call(guarded); err != nil {
			b.Fatal(err)
		}
	}
	var d, g []time.Duration
	i := 0
	for b.Loop() {
		first, second, fd, sd := direct, guarded, &d, &g
		if i%2 == 1 {
			first, second, fd, sd = guarded, direct, &g, &d
		}
		i++
		t0 := time.Now()
		if err := call(first); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := call(second); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		*fd, *sd = append(*fd, t1.Sub(t0)), append(*sd, t2.Sub(t1))
	}
	pd, pg := percentile(d, 50), percentile(g, 50)
	b.ReportMetric(micros(pd), "µs-direct-p50")
	b.ReportMetric(micros(pg), "µs-guard-p50")
	b.ReportMetric(micros(percentile(d, 90)), "µs-direct-p90")
	b.ReportMetric(micros(percentile(g, 90)), "µs-guard-p90")
	b.ReportMetric(float64(pg)/float64(pd), "guard/direct-p50")
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
