package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prometheus/procfs"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkGatewayVsDirect measures, in one run on one cluster, throughput
// and latency of single-object GETs and of LISTs of 500 objects at a fixed
// concurrency: directly against the first API server and through an
// in-process gateway in front of that same API server only (the gateway's
// own cost); directly against both API servers (a random one per request)
// and through the cluster's gateway process balancing over both (as
// deployed); and the in-process gateway again with the traffic log on,
// against the same gateway with it off. Modes alternate in rounds so that the
// machine's noise falls on all of them alike. hack/gateway-bench.sh runs
// it and prints the table.
//
// GATEWAY_BENCH_CONCURRENCY (default 8), GATEWAY_BENCH_SECONDS per mode
// and round (default 1) and GATEWAY_BENCH_ROUNDS (default 8) tune it:
// short rounds spread a noisy neighbour's bursts over every mode.
// GATEWAY_BENCH_OPS (e.g. "GET") runs only the named operations.
// GATEWAY_BENCH_PROFILE=FILE writes a CPU profile of the gateway process
// over the timed part (the package's cluster then starts the gateway
// with --profiling); only the gateway-2-upstreams mode sends it requests.
func BenchmarkGatewayVsDirect(b *testing.B) {
	env := clustertest.Get(b)
	ns := env.Namespace(b)
	ctx := context.Background()
	concurrency := envInt("GATEWAY_BENCH_CONCURRENCY", 8)
	per := time.Duration(envInt("GATEWAY_BENCH_SECONDS", 1)) * time.Second
	rounds := envInt("GATEWAY_BENCH_ROUNDS", 8)

	const objects = 500
	var names []string
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%03d", i), Labels: map[string]string{"app": "bench"}},
			Data: map[string]string{"config": strings.Repeat("x", 200)}}
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		names = append(names, cm.Name)
	}

	direct := env.Config
	// direct2 picks one of the API servers at random per request.
	direct2 := rest.CopyConfig(env.Config)
	direct2.Host = strings.Join(env.APIServerURLs(), ",")
	oneUpstream, _ := inProcessGateway(b, env, gateway.Options{Upstreams: env.APIServerURLs()[:1]})
	// The same with the traffic log on, every request logged to a file:
	// the log's own cost.
	logPath := b.TempDir() + "/traffic.log"
	logged, _ := inProcessGateway(b, env, gateway.Options{Upstreams: env.APIServerURLs()[:1], TrafficLog: trafficlog.File(logPath, 100, 1)})
	// Each gateway mode is compared with the direct mode that reaches the
	// same API servers: two Go API servers on two cores have longer tails
	// than one, whoever spreads the requests.
	modes := []struct {
		name, base string
		cfg        *rest.Config
	}{
		{"direct", "direct", direct},
		{"gateway-1-upstream", "direct", oneUpstream},
		{"gateway-1-upstream-traffic-log", "gateway-1-upstream", logged},
		{"direct-2-apiservers", "direct-2-apiservers", direct2},
		{"gateway-2-upstreams", "direct-2-apiservers", viaGateway(b, env)},
	}
	type benchOp struct {
		name string
		path func(*rand.Rand) string
	}
	ops := []benchOp{
		{"GET", func(r *rand.Rand) string {
			return "/api/v1/namespaces/" + ns + "/configmaps/" + names[r.IntN(len(names))]
		}},
		{"LIST-500", func(*rand.Rand) string { return "/api/v1/namespaces/" + ns + "/configmaps?labelSelector=app%3Dbench" }},
	}
	if only := os.Getenv("GATEWAY_BENCH_OPS"); only != "" {
		ops = slices.DeleteFunc(ops, func(o benchOp) bool { return !slices.Contains(strings.Split(only, ","), o.name) })
	}
	results := map[string][]time.Duration{}
	elapsed := map[string]time.Duration{}
	// The CPU each side used per mode: the control plane serving the
	// requests (both API servers and etcd), the gateway process, and this
	// process (the clients, and the in-process gateways of the
	// gateway-1-upstream modes).
	apiservers := []int{env.PID(localcluster.APIServerName(0)), env.PID(localcluster.APIServerName(1)), env.PID("etcd")}
	gatewayProcess := env.PID(localcluster.GatewayName)
	cpu := map[string]*[3]time.Duration{}
	clients := map[string]*http.Client{}
	for _, m := range modes {
		c, err := rest.HTTPClientFor(m.cfg)
		if err != nil {
			b.Fatal(err)
		}
		clients[m.name] = c
		// Warm connections and caches.
		run(b, c, m.cfg.Host, ops[0].path, concurrency, 300*time.Millisecond)
	}
	b.ResetTimer()
	profiled := profileGateway(b, env, time.Duration(rounds*len(ops)*len(modes))*per)
	for range rounds {
		for _, op := range ops {
			for _, m := range modes {
				before := [3]time.Duration{cpuOf(apiservers...), cpuOf(gatewayProcess), cpuOf(os.Getpid())}
				lat, took := run(b, clients[m.name], m.cfg.Host, op.path, concurrency, per)
				after := [3]time.Duration{cpuOf(apiservers...), cpuOf(gatewayProcess), cpuOf(os.Getpid())}
				key := op.name + "/" + m.name
				results[key] = append(results[key], lat...)
				elapsed[key] += took
				if cpu[key] == nil {
					cpu[key] = &[3]time.Duration{}
				}
				for i := range after {
					cpu[key][i] += after[i] - before[i]
				}
			}
		}
	}
	b.StopTimer()
	if err := profiled(); err != nil {
		b.Fatal(err)
	}

	fmt.Printf("\nconcurrency %d, %d rounds of %v per mode, %d CPUs\n", concurrency, rounds, per, runtimeCPUs())
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "op\tmode\treq/s\tp50 ms\tp99 ms\tvs\tthroughput\tadded p50 ms\tadded p99 ms\t")
	for _, op := range ops {
		for _, m := range modes {
			s := stats(results[op.name+"/"+m.name], elapsed[op.name+"/"+m.name])
			base := stats(results[op.name+"/"+m.base], elapsed[op.name+"/"+m.base])
			fmt.Fprintf(w, "%s\t%s\t%.0f\t%.2f\t%.2f\t%s\t%.1f%%\t%+.2f\t%+.2f\t\n", op.name, m.name, s.rps, ms(s.p50), ms(s.p99), m.base, 100*s.rps/base.rps, ms(s.p50-base.p50), ms(s.p99-base.p99))
			b.ReportMetric(s.rps, op.name+"/"+m.name+"-req/s")
			b.ReportMetric(ms(s.p99), op.name+"/"+m.name+"-p99-ms")
		}
	}
	_ = w.Flush()
	// CPU per request: what the gateway costs the machine beside what the
	// API servers spend. This process's figure in a gateway-1-upstream
	// mode, less its figure in direct, is the in-process gateway's.
	fmt.Println("\nCPU per request, µs (from /proc, 10 ms ticks):")
	fmt.Fprintln(w, "op\tmode\tAPI servers + etcd\tgateway process\tthis process\t")
	for _, op := range ops {
		for _, m := range modes {
			key := op.name + "/" + m.name
			n := time.Duration(len(results[key]))
			if n == 0 {
				continue
			}
			c := cpu[key]
			fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%.0f\t\n", op.name, m.name, us(c[0]/n), us(c[1]/n), us(c[2]/n))
		}
	}
	_ = w.Flush()
	if st, err := os.Stat(logPath); err == nil {
		fmt.Printf("traffic log: %d bytes\n", st.Size())
	}
	if path := os.Getenv("GATEWAY_BENCH_PROFILE"); path != "" {
		for _, op := range ops {
			fmt.Printf("gateway process profile: %s, %d %s requests through it\n", path, len(results[op.name+"/gateway-2-upstreams"]), op.name)
		}
	}
}

// profileGateway starts, when GATEWAY_BENCH_PROFILE names a file, a CPU
// profile of the gateway process for d, and returns the function that
// waits for it and writes the file.
func profileGateway(b *testing.B, env *clustertest.Env, d time.Duration) func() error {
	path := os.Getenv("GATEWAY_BENCH_PROFILE")
	if path == "" {
		return func() error { return nil }
	}
	url := strings.TrimSuffix(env.GatewayMetricsURL(), "/metrics") + "/debug/pprof/profile?seconds=" + strconv.Itoa(int(d.Round(time.Second).Seconds()))
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			done <- fmt.Errorf("profile the gateway: %w", err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if err == nil {
			err = os.WriteFile(path, body, 0o644)
		}
		if err != nil {
			err = fmt.Errorf("profile the gateway: %w", err)
		}
		done <- err
	}()
	return func() error { return <-done }
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// cpuOf is the CPU time, user and system, the processes have used so far
// (0 for a process that is gone, or off Linux).
func cpuOf(pids ...int) time.Duration {
	var seconds float64
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		if st, err := p.Stat(); err == nil {
			seconds += st.CPUTime()
		}
	}
	return time.Duration(seconds * float64(time.Second))
}

type summary struct {
	rps      float64
	p50, p99 time.Duration
}

func stats(lat []time.Duration, took time.Duration) summary {
	if len(lat) == 0 {
		return summary{}
	}
	slices.Sort(lat)
	return summary{
		rps: float64(len(lat)) / took.Seconds(),
		p50: lat[len(lat)/2],
		p99: lat[len(lat)*99/100],
	}
}

// run keeps concurrency requests going for d and returns each one's
// latency and the time taken.
func run(b *testing.B, client *http.Client, host string, path func(*rand.Rand) string, concurrency int, d time.Duration) ([]time.Duration, time.Duration) {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range concurrency {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			var lat []time.Duration
			for time.Now().Before(deadline) {
				t0 := time.Now()
				hosts := strings.Split(host, ",")
				req, _ := http.NewRequest(http.MethodGet, hosts[r.IntN(len(hosts))]+path(r), nil)
				req.Header.Set("Accept", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("%s: %s", req.URL.Path, resp.Status)
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, time.Since(start)
}

// inProcessGateway runs a gateway in this process, configured by opts,
// with the gateway's own identity and certificates, and returns the admin
// configuration through it, and the gateway.
func inProcessGateway(b testing.TB, env *clustertest.Env, opts gateway.Options) (*rest.Config, *gateway.Gateway) {
	own, err := clientcmd.BuildConfigFromFlags("", env.Dir+"/kubeconfigs/rampart-gateway.kubeconfig")
	if err != nil {
		b.Fatal(err)
	}
	opts.CertFile, opts.KeyFile, opts.ClientCAFile = env.PKIFile("gateway.crt"), env.PKIFile("gateway.key"), env.PKIFile("ca.crt")
	if opts.Log == nil {
		opts.Log = discardLog
	}
	g, err := gateway.New(own, opts)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(ctx, ln); err != nil {
			b.Error(err)
		}
	}()
	b.Cleanup(func() { cancel(); <-done })
	cfg := viaGateway(b, env)
	cfg.Host = "https://" + ln.Addr().String()
	return cfg, g
}

var discardLog = slog.New(slog.DiscardHandler)

func runtimeCPUs() int { return runtime.NumCPU() }
