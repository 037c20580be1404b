package admit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// BenchmarkNodeWritesUnderTheRules measures, in one run, interleaved,
// what the node layer's rules cost the writes a cluster makes all day,
// against the same write where no rule applies:
//
//   - node-status: the kubelet's heartbeat (a Node status patch as
//     system:node:NAME) of a node a NodeDisruptionBudget selects (its
//     webhook's match conditions are evaluated by the API server and keep
//     the kubelet away from Rampart), against a node no budget selects;
//   - node-label: a user's label change on such a node (the match
//     conditions again: no departure, no call), against the other node;
//   - node-cordon: a cordon, judged by the webhook (dry run: admitted and
//     not recorded), against a cordon of the other node (no webhook);
//   - pod-status: the kubelet's status write of a pod labelled
//     rampart.io/explicit-deletion=true (the compiled policy
//     saved-pods.rampart.io evaluates its match conditions), against the
//     same write of an unlabelled pod.
//
// All writes are dry runs, so each repeats the same change. Reported:
// each case's p50 and p99 in ms and the ratio of its p50 to its no-rule
// twin's. hack/node-latency.sh prints them as a table.
func BenchmarkNodeWritesUnderTheRules(b *testing.B) {
	env := clustertest.Get(b)
	ctx := context.Background()
	name := "lat"
	inPool := pool(b, env, name, 2)[0]
	free := pool(b, env, "lat-free", 1)[0]
	create(b, env, fmt.Sprintf("metadata: {name: %s}\nspec: {nodeSelector: {matchLabels: {pool: %s}}, minAvailable: 1}", name, name))
	ns := env.Namespace(b)
	pods := map[string]string{"guarded": inPool, "plain": inPool}
	for p := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p}, Spec: corev1.PodSpec{NodeName: inPool,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if p == "guarded" {
			pod.Labels = map[string]string{v1alpha1.LabelExplicitDeletion: "true"}
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	kubelet := func(node string) kubernetes.Interface {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
		cfg.QPS, cfg.Burst = -1, 0
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	heartbeat := func(node string) func() error {
		c := kubelet(node)
		return func() error {
			body := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q}]}}`,
				time.Now().UTC().Format(time.RFC3339))
			_, err := c.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(body), dry, "status")
			return err
		}
	}
	nodePatch := func(node, body string) func() error {
		return func() error {
			_, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), dry)
			return err
		}
	}
	podStatus := func(pod string) func() error {
		c := kubelet(inPool)
		return func() error {
			body := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","lastProbeTime":%q}]}}`, time.Now().UTC().Format(time.RFC3339))
			_, err := c.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, []byte(body), dry, "status")
			return err
		}
	}
	cases := map[string]func() error{
		"node-status":        heartbeat(inPool),
		"node-status-norule": heartbeat(free),
		"node-label":         nodePatch(inPool, `{"metadata":{"labels":{"bench":"yes"}}}`),
		"node-label-norule":  nodePatch(free, `{"metadata":{"labels":{"bench":"yes"}}}`),
		"node-cordon":        nodePatch(inPool, `{"spec":{"unschedulable":true}}`),
		"node-cordon-norule": nodePatch(free, `{"spec":{"unschedulable":true}}`),
		"pod-status":         podStatus("guarded"),
		"pod-status-norule":  podStatus("plain"),
	}
	// Every case works before the clock starts (the budget's webhook is
	// in force from its creation; the kubelet's identities are allowed).
	for c, f := range cases {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return f() == nil, nil
		}); err != nil {
			b.Fatalf("%s: %v", c, f())
		}
	}
	names := make([]string, 0, len(cases))
	for c := range cases {
		names = append(names, c)
	}
	took := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		for _, c := range names {
			start := time.Now()
			if err := cases[c](); err != nil {
				b.Fatalf("%s: %v", c, err)
			}
			took[c] = append(took[c], time.Since(start))
		}
	}
	b.StopTimer()
	pct := func(c string, q float64) float64 {
		d := slices.Clone(took[c])
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	for _, c := range names {
		b.ReportMetric(pct(c, 0.5), c+"-p50-ms")
		b.ReportMetric(pct(c, 0.99), c+"-p99-ms")
	}
	for _, c := range []string{"node-status", "node-label", "node-cordon", "pod-status"} {
		b.ReportMetric(pct(c, 0.5)/pct(c+"-norule", 0.5), c+"/norule-p50")
	}
	b.ReportMetric(0, "ns/op")
}
