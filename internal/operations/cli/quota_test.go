package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/operations/quota"
)

// A namespace's quota planned from its use and applied with `rampart quota
// plan --apply`: the API server then refuses a surge of pods past it (403,
// exceeded quota) while a pod without requests gets in on the LimitRange's
// defaults, the manager's metrics show the used/hard ratio, and `rampart
// status` lists the namespace at its limit.
func TestQuotaPlanApplyCapsASurge(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	pods := env.Client.CoreV1().Pods(ns)
	newPod := func(name string, r corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Resources: r}}}}
	}
	declared := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	const base = 3
	for i := range base {
		if _, err := pods.Create(ctx, newPod(fmt.Sprintf("usual-%d", i), declared), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := rampartCLI(ctx, t, rampart, env)
	t.Log(run("quota", "plan", "-n", ns, "--apply"))

	q, err := env.Client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the applied quota: %v", err)
	}
	hardPods := q.Spec.Hard[corev1.ResourcePods]
	if hardPods.Value() <= base {
		t.Fatalf("quota allows %d pods for %d in use; want the use plus a margin", hardPods.Value(), base)
	}
	if mf := q.ManagedFields; len(mf) == 0 || mf[0].Manager != "rampart" || mf[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("quota's managed fields %+v; want a server-side apply by rampart", mf)
	}
	// The quota admission refuses pods until the quota controller has
	// computed the quota's status.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		q, err = env.Client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		return err == nil && len(q.Status.Hard) > 0, nil
	}); err != nil {
		t.Fatalf("quota status never computed: %v", err)
	}

	// The surge: pods as a scaled workload or a burst of jobs would make
	// them, without requests (the LimitRange gives them its defaults).
	admitted := 0
	var refusal error
	for i := range 3 * base {
		_, err := pods.Create(ctx, newPod(fmt.Sprintf("surge-%d", i), corev1.ResourceRequirements{}), metav1.CreateOptions{})
		if err != nil {
			refusal = err
			break
		}
		admitted++
	}
	if refusal == nil || !apierrors.IsForbidden(refusal) || !strings.Contains(refusal.Error(), "exceeded quota") {
		t.Fatalf("surge of %d pods past a quota of %d: last error %v; want 403 exceeded quota", 3*base, hardPods.Value(), refusal)
	}
	if admitted == 0 {
		t.Errorf("no pod without requests admitted under the quota; the LimitRange defaults should let them in")
	}
	if total := base + admitted; int64(total) > hardPods.Value() {
		t.Errorf("%d pods in the namespace, over the quota's %d", total, hardPods.Value())
	}
	t.Logf("surge: %d pods admitted past %d in use, then refused: %v", admitted, base, refusal)

	// The manager's metrics show the ratio the quota's status gives.
	series := fmt.Sprintf(`rampart_quota_used_ratio{namespace=%q,resource="pods",resourcequota=%q} `, ns, quota.Name)
	var want, got float64
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		q, err := env.Client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		used, hard := q.Status.Used[corev1.ResourcePods], q.Status.Hard[corev1.ResourcePods]
		want = float64(used.Value()) / float64(hard.Value())
		text, err := env.ScrapeManagerMetrics(ctx, 0)
		if err != nil {
			return false, nil
		}
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, series); ok {
				got, _ = strconv.ParseFloat(v, 64)
				return got == want, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("metrics: %s%v, want %v (the quota's used/hard): %v", series, got, want, err)
	}
	t.Logf("metrics: %s%v", series, got)

	// The manager keeps the namespaces' peaks where the next plan reads them.
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cm, err := env.Client.CoreV1().ConfigMaps(localcluster.ManagerNamespace).Get(ctx, quota.PeaksConfigMap, metav1.GetOptions{})
		return err == nil && cm.Data[quota.PeaksKey] != "", nil
	}); err != nil {
		t.Errorf("no ConfigMap %s/%s of peaks: %v", localcluster.ManagerNamespace, quota.PeaksConfigMap, err)
	}

	// Now at its limit, the namespace's next plan grows the quota from the
	// use now; --diff says so before anything changes, and the YAML is
	// ready to apply.
	diff := run("quota", "plan", "-n", ns, "--diff")
	if !strings.Contains(diff, fmt.Sprintf("~ pods: %d -> ", hardPods.Value())) {
		t.Errorf("quota plan --diff at the limit shows no larger pods quota:\n%s", diff)
	}
	manifests := run("quota", "plan", "-n", ns)
	for _, kind := range []string{"kind: ResourceQuota", "kind: LimitRange"} {
		if !strings.Contains(manifests, kind) {
			t.Errorf("quota plan prints no %s:\n%s", kind, manifests)
		}
	}

	status := run("status")
	if _, after, ok := strings.Cut(status, "NAMESPACES CLOSEST TO THEIR QUOTAS"); !ok || !strings.Contains(after, ns) {
		t.Errorf("rampart status does not list %s among the namespaces closest to their quotas:\n%s", ns, status)
	}
}
