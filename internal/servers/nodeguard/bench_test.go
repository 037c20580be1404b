package nodeguard

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkPassThrough times CRI calls made directly to the fake runtime
// and through the guard, alternating in one run so that both see the same
// machine, and reports each p50 and p90 and the ratio of the p50s:
//
//	go test -run XXX -bench PassThrough -benchtime 5000x ./internal/servers/nodeguard/
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
	alternateEach(b, []path{{"direct", direct}, {"guard", r.kubelet}}, []criCall{
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

// path is one way to the runtime a benchmark times: "direct" first.
type path struct {
	name string
	c    runtimeapi.RuntimeServiceClient
}

// alternateEach runs alternate for each call, as a sub-benchmark.
func alternateEach(b *testing.B, paths []path, calls []criCall) {
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) { alternate(b, paths, c.call) })
	}
}

// alternate times call made along each path, one after the other, turning
// which goes first, and reports each path's p50 and p90 and the ratio of
// each p50 to the first path's (direct).
func alternate(b *testing.B, paths []path, call func(runtimeapi.RuntimeServiceClient) error) {
	for range 200 { // warm the connections and the pools
		for _, p := range paths {
			if err := call(p.c); err != nil {
				b.Fatal(err)
			}
		}
	}
	took := make([][]time.Duration, len(paths))
	i := 0
	for b.Loop() {
		for k := range paths {
			j := (i + k) % len(paths)
			t0 := time.Now()
			if err := call(paths[j].c); err != nil {
				b.Fatal(err)
			}
			took[j] = append(took[j], time.Since(t0))
		}
		i++
	}
	direct := percentile(took[0], 50)
	for j, p := range paths {
		p50 := percentile(took[j], 50)
		b.ReportMetric(micros(p50), "µs-"+p.name+"-p50")
		b.ReportMetric(micros(percentile(took[j], 90)), "µs-"+p.name+"-p90")
		if j > 0 {
			b.ReportMetric(float64(p50)/float64(direct), p.name+"/direct-p50")
		}
	}
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
