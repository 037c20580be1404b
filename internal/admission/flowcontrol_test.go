package admission_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/localcluster"
	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
)

var flowControls = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "deletionflowcontrols"}

func bareConfigMaps(t testing.TB, env *clustertest.Env, ns string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("c-%03d%c", i, "0123456789abcdefghijklmnopqrstuvwxyz"[i%36])
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// A storm of concurrent deletes, spread by the API server over three
// manager replicas, never gets more than the limit through; stopping a
// replica mid-storm neither resets the count nor loses the trip; a reset
// lets deletes through again.
func TestFlowControlIsExactAcrossReplicasAndDurable(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3})
	ctx := context.Background()
	ns := env.Namespace(t)
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: storm}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  limits: [{count: 25, window: 10m}]
  breaker: Manual`, ns)), &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(flowControls).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := bareConfigMaps(t, env, ns, 120)
	// The webhook follows the flow control within a moment: probe with
	// dry runs, which are judged but never counted.
	eventually(t, "the flow control's webhook to be registered", func(ctx context.Context) (bool, error) {
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, w := range cfg.Webhooks {
			if strings.HasSuffix(w.Name, "storm.flowcontrol.rampart.io") {
				n++
			}
		}
		return n == 3, nil
	})

	var admitted, denied atomic.Int32
	var wg sync.WaitGroup
	work := make(chan string)
	for range 24 {
		wg.Go(func() {
			for name := range work {
				err := env.Client.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
				switch {
				case err == nil:
					admitted.Add(1)
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), `DeletionFlowControl "storm"`):
					denied.Add(1)
				default:
					t.Errorf("delete %s: %v", name, err)
				}
			}
		})
	}
	for _, name := range names[:40] {
		work <- name
	}
	close(work)
	wg.Wait()
	if got := admitted.Load(); got != 25 {
		t.Fatalf("%d deletes admitted with a limit of 25 (denied %d)", got, denied.Load())
	}
	left, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(left.Items); n != 120-25+1 { // + kube-root-ca.crt
		t.Fatalf("%d config maps left, want %d", n, 120-25+1)
	}

	// The trip counts on the replica that saw it; every replica reports
	// the breaker open, from the shared status.
	trippedOn := 0
	for i := range 3 {
		resp, err := http.Get(env.ManagerMetricsURL(i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `rampart_flowcontrol_trips_total{name="storm"} 1`) {
			trippedOn++
		}
		if !strings.Contains(string(body), `rampart_flowcontrol_breaker_open{name="storm"} 1`) {
			t.Errorf("replica %d does not report the breaker open", i)
		}
	}
	if trippedOn != 1 {
		t.Errorf("%d replicas counted the trip, want exactly 1", trippedOn)
	}

	// Restart-proof: stop two replicas; the survivor still holds the trip,
	// because it is in the flow control's status, not in memory.
	for _, name := range []string{localcluster.ManagerName(1), localcluster.ManagerName(2)} {
		if err := env.StopComponent(name); err != nil {
			t.Fatal(err)
		}
	}
	// names[42] ends in "6": the API server sends it to replica 0, the
	// survivor (see the partition of admission.ValidatingConfig).
	err = env.Client.CoreV1().ConfigMaps(ns).Delete(ctx, names[42], metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "tripped its breaker") {
		t.Fatalf("after two replicas stopped, the breaker must still hold: %v", err)
	}
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rampart, "flowcontrol", "status", "storm", "--kubeconfig", env.Kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "breaker Open; 25/25 in 10m0s") {
		t.Fatalf("rampart flowcontrol status: %v\n%s", err, out)
	}
	events, err := env.Client.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=storm,reason=BreakerTripped"})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no BreakerTripped event: %v", err)
	}
	if out, err := exec.Command(rampart, "flowcontrol", "reset", "storm", "--kubeconfig", env.Kubeconfig).CombinedOutput(); err != nil {
		t.Fatalf("rampart flowcontrol reset: %v\n%s", err, out)
	}
	if err := env.Client.CoreV1().ConfigMaps(ns).Delete(ctx, names[42], metav1.DeleteOptions{}); err != nil {
		t.Fatalf("after reset: %v", err)
	}
}

// BenchmarkFlowControlThroughput measures how many deletes per second get
// through the real API server when a DeletionFlowControl counts them (limit
// far away), with one and with three manager replicas, against deletes no
// flow control counts, in the same cluster and run. Run with
// -benchtime=1x: each iteration deletes 300 config maps with 16 clients.
func BenchmarkFlowControlThroughput(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("managers=%d", replicas), func(b *testing.B) {
			env := clustertest.Start(b, localcluster.Options{Nodes: 1, Managers: replicas})
			ctx := context.Background()
			counted, free := env.Namespace(b), env.Namespace(b)
			u := &unstructured.Unstructured{}
			_ = yaml.Unmarshal([]byte(fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: bench}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  limits: [{count: 1000000, window: 10m}]`, counted)), &u.Object)
			if _, err := env.Dynamic.Resource(flowControls).Create(ctx, u, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			rate := func(ns string) float64 {
				names := bareConfigMaps(b, env, ns, 300)
				start := time.Now()
				var wg sync.WaitGroup
				work := make(chan string)
				for range 16 {
					wg.Go(func() {
						for n := range work {
							if err := env.Client.CoreV1().ConfigMaps(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
								b.Error(err)
							}
						}
					})
				}
				for _, n := range names {
					work <- n
				}
				close(work)
				wg.Wait()
				return float64(len(names)) / time.Since(start).Seconds()
			}
			// Measure only once the API server calls the flow control.
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				n := 0
				for _, w := range cfg.Webhooks {
					if strings.HasSuffix(w.Name, "bench.flowcontrol.rampart.io") {
						n++
					}
				}
				return n == replicas, nil
			}); err != nil {
				b.Fatal(err)
			}
			var c, f float64
			for b.Loop() {
				f = rate(free)
				c = rate(counted)
			}
			b.ReportMetric(f, "uncounted-deletes/s")
			b.ReportMetric(c, "counted-deletes/s")
		})
	}
}
