package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

var listStorm = Drill{
	Name: "list-storm",
	Incident: "dozens of clients LIST every pod of a 10,000-pod cluster from etcd in a loop: the API server's memory and latency " +
		"blow up and ordinary clients time out (ByteDance report: List storms, APIServer OOM, avalanche)",
	Run: func(ctx context.Context, t Target) (Loss, error) { return runListStorm(ctx, t, false) },
}

// listStormAPF is list-storm where no gateway can stand (a managed control
// plane): every client reaches the API server itself, and the protected
// side has the API Priority and Fairness objects Rampart's advisor writes
// (apf.Suggest, what `rampart traffic profile --suggest apf` prints) from
// the API server's own audit log of a first burst of the storm, as an
// operator would after the incident. The storm is three tools of eight
// workers each (24 LISTs at once, as in list-storm): the advisor isolates
// a client whose LISTs held several seats at once, and a Metadata-level
// audit log, the usual one, shows each LIST as one seat.
var listStormAPF = Drill{
	Name: "list-storm-apf",
	Incident: "the list-storm with no gateway: three tools of eight workers LIST every pod of a 10,000-pod cluster in a loop, " +
		"straight to the API server; protected only by the API Priority and Fairness objects rampart suggests from the audit log",
	Run: func(ctx context.Context, t Target) (Loss, error) { return runListStorm(ctx, t, true) },
}

// apfStormTools are list-storm-apf's storm users, each running
// stormClients/apfStormTools workers.
const apfStormTools = 3

const (
	// stormPods is the cluster's size in the report's terms.
	stormPods = 10000
	// stormClients LIST all pods at once, in a loop.
	stormClients = 24
	// stormFor is how long the storm lasts at full scale; a drill at a
	// smaller scale storms for a share of it, at least stormAtLeast (the
	// unprotected business client still meets several LISTs in flight).
	stormFor     = 30 * time.Second
	stormAtLeast = 10 * time.Second
	// businessSlow is the bound on one business request: slower than this
	// (or failed) counts as lost.
	businessSlow = time.Second
	// businessTimeout is when the business client gives up on a request.
	businessTimeout = 10 * time.Second
)

// runListStorm fills the cluster with pods, lets a business client do
// ordinary reads and writes, and starts the storm: stormClients clients
// LIST every pod without resourceVersion=0 or a limit, in a loop, as a
// script would. Unprotected they reach the API server directly;
// protected, they and the business client go through the gateway with
// the default TrafficPolicies. The loss is the business requests that
// failed or took longer than businessSlow; the bound is 1% of them (a p99
// under businessSlow).
//
// With viaAPF (list-storm-apf) every client reaches the API server
// directly on both sides, and the protected side first profiles a burst of
// the storm from the audit log and applies the suggested APF objects.
func runListStorm(ctx context.Context, t Target, viaAPF bool) (Loss, error) {
	if t.Local == nil {
		return Loss{}, errors.New("the list-storm drills need the local clusters `rampart drill` starts (they read the API server's memory): run without --kubeconfig")
	}
	ns, group := t.Prefix+"-list-storm", t.Prefix+":list-storm"
	pods, stormLasts, calmFor := stormSize(t.Scale, viaAPF)
	done, err := t.stormSetup(ctx, ns, group, pods)
	defer done()
	if err != nil {
		return Loss{}, err
	}
	host := t.Local.APIServerURL()
	if t.Protected && !viaAPF {
		host = t.Local.GatewayURL()
	}
	issue := clientIssuer(t.Local, host, group)
	stormUser := func(i int) string { return fmt.Sprintf("%s-storm-%d", t.Prefix, i) }
	if viaAPF {
		stormUser = func(i int) string { return fmt.Sprintf("%s-storm-tool-%d", t.Prefix, i%apfStormTools) }
	}
	var advised apfAdvice
	if viaAPF && t.Protected {
		var undo func()
		var err error
		if advised, undo, err = t.adviseAPF(ctx, issue, stormUser); err != nil {
			return Loss{}, err
		}
		defer undo()
	}
	business, err := issue(t.Prefix + "-business")
	if err != nil {
		return Loss{}, err
	}
	biz, err := newBusinessClient(ctx, business, ns)
	if err != nil {
		return Loss{}, err
	}
	apiserver := t.Local.PID(localcluster.APIServerName(0))

	// Five calm seconds first, for comparison.
	calm := biz.run(ctx, calmFor)
	calmRSS := rssBytes(apiserver)

	storm, err := startStorm(ctx, func(i int) (*rest.Config, error) { return issue(stormUser(i)) }, apiserver)
	if err != nil {
		return Loss{}, err
	}
	during := biz.run(ctx, stormLasts)
	peakRSS := storm.stop()[0]

	measured := map[string]float64{
		"apiserver_calm_rss_mib": mib(calmRSS),
		"apiserver_peak_rss_mib": mib(peakRSS),
	}
	if viaAPF && t.Protected {
		measured["apf_heavy_level_seats"] = float64(advised.seats)
		measured["apf_isolated_clients"] = float64(advised.isolated)
	}
	return stormLoss(calm, during, storm, pods, stormLasts, measured), nil
}

// stormLoss is a storm drill's loss: the business requests that failed
// or took longer than businessSlow, bound 1% of them (a p99 under
// businessSlow); its figures are the business client's, the storm's and
// those of measured.
func stormLoss(calm, during businessFigures, storm *stormRun, pods int, lasts time.Duration, measured map[string]float64) Loss {
	lost := during.failed + during.slow
	maps.Copy(measured, map[string]float64{
		"business_p99_ms":         ms(during.quantile(0.99)),
		"business_p50_ms":         ms(during.quantile(0.50)),
		"business_errors":         float64(during.failed),
		"business_requests":       float64(len(during.latencies)),
		"calm_business_p99_ms":    ms(calm.quantile(0.99)),
		"storm_lists_served":      float64(storm.served.Load()),
		"storm_lists_refused":     float64(storm.refused.Load()),
		"storm_list_errors":       float64(storm.failed.Load()),
		"pods":                    float64(pods),
		"storm_clients":           stormClients,
		"storm_seconds":           lasts.Seconds(),
		"business_slow_bound_ms":  ms(businessSlow),
		"business_timeout_ms":     ms(businessTimeout),
		"business_failed_or_slow": float64(lost),
	})
	return Loss{
		Lost: lost, Total: len(during.latencies), Bound: len(during.latencies) / 100,
		Unit:     fmt.Sprintf("business requests failed or slower than %s", businessSlow),
		Denied:   storm.refusal(),
		Measured: measured,
	}
}

// stormSize is the storm's size at scale: its pods, how long it lasts and
// the calm before it. At a scale above 1 (make test), the variants run
// small: list-storm runs the storm at that scale.
func stormSize(scale int, small bool) (pods int, lasts, calm time.Duration) {
	if small && scale > 1 {
		return stormPods / (8 * scale), stormAtLeast / 2, 2 * time.Second
	}
	return stormPods / scale, max(stormFor/time.Duration(scale), stormAtLeast), 5 * time.Second
}

// stormSetup makes the storm's namespace ns with pods idle pods, and lets
// group list pods and use ConfigMaps there; done removes them all.
func (t Target) stormSetup(ctx context.Context, ns, group string, pods int) (done func(), err error) {
	done = func() {}
	if err := t.namespace(ctx, ns, nil); err != nil {
		return done, err
	}
	done = func() { t.removeStormObjects(ns) }
	if err := t.grantStorm(ctx, ns, group); err != nil {
		return done, err
	}
	return done, t.createIdlePods(ctx, ns, pods)
}

// stormRun is a storm under way, with the peak memory of the API servers
// it watches.
type stormRun struct {
	*stormCounts
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	peak   []int64
}

// startStorm starts stormClients storm clients, client i as cfg(i), and
// samples the resident memory of the processes pids every 250 ms.
func startStorm(ctx context.Context, cfg func(i int) (*rest.Config, error), pids ...int) (*stormRun, error) {
	stormCtx, cancel := context.WithCancel(ctx)
	s := &stormRun{stormCounts: &stormCounts{}, cancel: cancel, peak: make([]int64, len(pids))}
	for i := range stormClients {
		c, err := cfg(i)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.wg.Go(func() { s.client(stormCtx, c) })
	}
	s.wg.Go(func() {
		for stormCtx.Err() == nil {
			s.mu.Lock()
			for i, pid := range pids {
				s.peak[i] = max(s.peak[i], rssBytes(pid))
			}
			s.mu.Unlock()
			sleep(stormCtx, 250*time.Millisecond)
		}
	})
	return s, nil
}

// stop ends the storm and returns the peak memory of each process.
func (s *stormRun) stop() []int64 {
	s.cancel()
	s.wg.Wait()
	return s.peak
}

// grantStorm lets the drill's clients (group) list pods everywhere and
// read and write ConfigMaps in ns, as an application's role would.
func (t Target) grantStorm(ctx context.Context, ns, group string) error {
	name := t.Prefix + "-list-storm"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update"}},
		},
	}
	if _, err := t.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
	}
	_, err := t.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	return err
}

// removeStormObjects deletes the drill's pods and waits until they are
// gone, so that later drills do not run beside ten thousand deletions.
func (t Target) removeStormObjects(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := t.Prefix + "-list-storm"
	_ = t.Client.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
	_ = t.Client.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	_ = t.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	t.cleanupNamespace(ns)
	_ = poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := t.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err != nil, nil
	})
}

// createIdlePods creates n pods of a realistic size (~3 KB: labels,
// annotations, env, resources, probes) that no scheduler picks up, so
// they cost the API server and etcd what real pods cost and nothing else.
func (t Target) createIdlePods(ctx context.Context, ns string, n int) error {
	note := strings.Repeat("x", 700)
	env := make([]corev1.EnvVar, 12)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-of-setting-%d-for-the-application", i)}
	}
	pod := func(i int) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("app-%05d", i),
				Labels:      map[string]string{"app": fmt.Sprintf("app-%d", i%100), "tier": "web", "team": "payments", "release": "stable", "version": "v1.2.3"},
				Annotations: map[string]string{"rampart.io/drill-note": note, "prometheus.io/scrape": "true"},
			},
			Spec: corev1.PodSpec{
				// No scheduler has this name: the pod stays Pending,
				// untouched, as long as the drill needs it.
				SchedulerName: "rampart-drill-none",
				Containers: []corev1.Container{{
					Name: "app", Image: "registry.example/payments/app:v1.2.3", Env: env,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
				}},
			},
		}
	}
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	return parallel(ctx, names, func(ctx context.Context, name string) error {
		i, _ := strconv.Atoi(name)
		_, err := t.Client.CoreV1().Pods(ns).Create(ctx, pod(i), metav1.CreateOptions{})
		return err
	})
}

// clientIssuer returns a function making a client of host with a new
// certificate for user in group, issued by the cluster's CA: each storm
// client is a different user, as different scripts and teams are.
func clientIssuer(c *localcluster.Cluster, host, group string) func(user string) (*rest.Config, error) {
	ca, caErr := pki.Load(strings.TrimSuffix(c.PKIFile("ca.crt"), ".crt"))
	return func(user string) (*rest.Config, error) {
		if caErr != nil {
			return nil, caErr
		}
		kp, err := ca.Issue(pki.Request{CommonName: user, Organization: []string{group}, Client: true, Now: time.Now(), Validity: time.Hour})
		if err != nil {
			return nil, err
		}
		key, err := kp.KeyPEM()
		if err != nil {
			return nil, err
		}
		return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: kp.CertPEM(), KeyData: key}}, nil
	}
}

// stormCounts are the storm clients' outcomes.
type stormCounts struct {
	served, refused, failed atomic.Int64
	mu                      sync.Mutex
	firstRefusal            string
}

// client LISTs every pod in a loop, as a careless script does: no limit,
// no resourceVersion, reading the whole answer. Refused, it waits a second
// and tries again.
func (s *stormCounts) client(ctx context.Context, cfg *rest.Config) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		s.failed.Add(1)
		return
	}
	// Its own connection, like a separate process.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}, Timeout: 2 * time.Minute}
	defer hc.CloseIdleConnections()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/pods", nil)
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				s.failed.Add(1)
				sleep(ctx, time.Second)
			}
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.failed.Add(1)
			}
		case resp.StatusCode == http.StatusOK:
			s.served.Add(1)
		default:
			s.refused.Add(1)
			s.noteRefusal(resp.StatusCode, body)
			sleep(ctx, time.Second)
		}
	}
}

func (s *stormCounts) noteRefusal(code int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstRefusal != "" {
		return
	}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		s.firstRefusal = st.Message
		return
	}
	s.firstRefusal = strconv.Itoa(code) + " " + string(body)
}

func (s *stormCounts) refusal() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstRefusal
}

// businessClient is an application doing ordinary work through client-go:
// read its ConfigMap, write it, list its namespace's ConfigMaps.
type businessClient struct {
	cs kubernetes.Interface
	ns string
}

func newBusinessClient(ctx context.Context, cfg *rest.Config, ns string) (*businessClient, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.Timeout = 100, 100, businessTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "business-state"}, Data: map[string]string{"n": "0"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("the business client's ConfigMap: %w", err)
	}
	return &businessClient{cs: cs, ns: ns}, nil
}

// businessFigures are one run's latencies and failures.
type businessFigures struct {
	latencies    []time.Duration
	failed, slow int
}

func (f businessFigures) quantile(q float64) time.Duration {
	if len(f.latencies) == 0 {
		return 0
	}
	l := slices.Clone(f.latencies)
	slices.Sort(l)
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// run does a request every 100 ms for d, one after another, and measures
// each. A failed request counts at the time it took to fail.
func (b *businessClient) run(ctx context.Context, d time.Duration) businessFigures {
	var f businessFigures
	cms := b.cs.CoreV1().ConfigMaps(b.ns)
	ops := []func(ctx context.Context) error{
		func(ctx context.Context) error {
			_, err := cms.Get(ctx, "business-state", metav1.GetOptions{})
			return err
		},
		func(ctx context.Context) error {
			cm, err := cms.Get(ctx, "business-state", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(cm.Data["n"])
			cm.Data["n"] = strconv.Itoa(n + 1)
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			return err
		},
		func(ctx context.Context) error {
			_, err := cms.List(ctx, metav1.ListOptions{})
			return err
		},
	}
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		start := time.Now()
		opCtx, cancel := context.WithTimeout(ctx, businessTimeout)
		err := ops[i%len(ops)](opCtx)
		cancel()
		took := time.Since(start)
		f.latencies = append(f.latencies, took)
		switch {
		case err != nil:
			f.failed++
		case took > businessSlow:
			f.slow++
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return f
}

// rssBytes is a process's resident memory, 0 if it cannot be read.
func rssBytes(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func mib(b int64) float64        { return float64(b) / (1 << 20) }
