package etcdtool_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

// TestRestoreWithARealKubelet follows all five of docs/etcd.md's restore
// steps on a cluster with one real node (kubelet, node guard, containerd).
// Pod "before" runs when the snapshot is saved, pod "after" is made once
// it is. What a user sees once the kubelet is back: "before" is Running
// with the same UID, and containerd runs the very container it ran before
// the restore (same ID, same sandbox, attempt 0, restartCount 0 in the
// API, no Killing Event); "deleted", deleted after the snapshot, runs
// again; "after" is gone from the API and the kubelet has stopped its
// container, but "after-protected", labelled rampart.io/explicit-deletion,
// still runs, its kill refused by the node guard, until stopped on the
// runtime as the refusal says; nothing else runs or was stopped.
func TestRestoreWithARealKubelet(t *testing.T) {
	etcdutlPath(t)
	env := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 1})
	node := env.RealNodes(t, 1)[0]
	ctx := context.Background()
	ns := env.Namespace(t)
	before := env.StartRealPod(t, node, ns, realNodePod("before"))
	deleted := env.StartRealPod(t, node, ns, realNodePod("deleted"))

	// Step 1: save, copy out of the store, check.
	store, snap := t.TempDir(), filepath.Join(t.TempDir(), "s.db")
	if out, ok := rampart(t, append([]string{"etcd", "snapshot", "save", "--dir=" + store, "--name=etcd/s.db"}, etcdFlags(env)...)...); !ok {
		t.Fatalf("snapshot save:\n%s", out)
	}
	for _, args := range [][]string{
		{"etcd", "snapshot", "get", "etcd/s.db", "--dir=" + store, "--to=" + snap},
		{"etcd", "snapshot", "verify", snap},
		{"etcd", "check", "--snapshot=" + snap},
	} {
		if out, ok := rampart(t, args...); !ok {
			t.Fatalf("step 1 failed:\n%s", out)
		}
	}
	after := env.StartRealPod(t, node, ns, realNodePod("after"))
	// Labelled for the node guard, which refuses to let the kubelet kill
	// a protected pod the API lost without a delete.
	keptPod := realNodePod("after-protected")
	keptPod.Labels[v1alpha1.LabelExplicitDeletion] = "true"
	kept := env.StartRealPod(t, node, ns, keptPod)
	if out, err := env.Kubectl(t, "delete", "pod", "-n", ns, deleted.Name, "--grace-period=1"); err != nil {
		t.Fatalf("kubectl delete pod: %v: %s", err, out)
	}

	// Step 2: the kubelet stops first; its containers keep running.
	start := time.Now()
	kubelet := localcluster.KubeletName(node)
	if err := env.StopComponent(kubelet); err != nil {
		t.Fatal(err)
	}
	// Steps 2-4: API server and etcd stop, the restore exactly as the
	// docs/etcd.md writes it, etcd and the API server start again, and every
	// controller restarts.
	restoreEtcd(t, env, snap, "--bump-revision", "1000000000", "--mark-compacted")
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := env.RestartControllers(rctx); err != nil {
		t.Fatal(err)
	}
	if n := runningOf(t, env, node, after.UID); n != 1 {
		t.Fatalf("with the kubelet stopped, %d containers of pod %q run, want 1: something else stopped it", n, after.Name)
	}
	// Step 5: the kubelet starts and makes the node match the restored
	// state.
	if err := env.StartComponent(kubelet); err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer kcancel()
	if err := env.WaitRealNodeReady(kctx, node); err != nil {
		t.Fatal(err)
	}
	t.Logf("node Ready again %.1fs after the kubelet stopped", time.Since(start).Seconds())

	if _, err := env.Client.CoreV1().Pods(ns).Get(ctx, after.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %q, made after the snapshot, is still in the API: %v", after.Name, err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		n := runningOf(t, env, node, after.UID)
		last = strconv.Itoa(n) + " running"
		return n == 0, nil
	})
	if err != nil {
		t.Fatalf("the kubelet did not stop the containers of pod %q, which the restored API does not have (%s)", after.Name, last)
	}
	t.Logf("pod %q's container stopped by the kubelet %.1fs after the kubelet stopped", after.Name, time.Since(start).Seconds())

	// Pod "before" keeps its container, and keeps it for a while: the
	// kubelet has synced every pod by the time it stops an orphan, and a
	// kill of this one would show within seconds.
	hold := time.Now().Add(10 * time.Second)
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = env.RealPodChange(ctx, t, before)
		return last != "" || time.Now().After(hold), nil
	})
	if err != nil || last != "" {
		t.Fatalf("pod %q, saved in the snapshot, did not keep its container: %s", before.Name, last)
	}
	// Pod "deleted" is back in the API, so the kubelet runs it again, in
	// a new container.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, deleted.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		n := runningOf(t, env, node, deleted.UID)
		last = fmt.Sprintf("UID %s, phase %s, %d containers running", p.UID, p.Status.Phase, n)
		return p.UID == deleted.UID && p.Status.Phase == corev1.PodRunning && n == 1, nil
	})
	if err != nil {
		t.Fatalf("pod %q, deleted after the snapshot, was not run again (%s)", deleted.Name, last)
	}
	t.Logf("pod %q, deleted after the snapshot, runs again %.1fs after the kubelet stopped", deleted.Name, time.Since(start).Seconds())
	// The protected pod made after the snapshot still runs: the guard
	// refused its kill, and says so in its metrics (and log). The way
	// out its refusal names, stopping the pod on the runtime past the
	// guard, ends it.
	if n := runningOf(t, env, node, kept.UID); n != 1 {
		t.Errorf("pod %q, labelled %s=true and made after the snapshot, has %d running containers, want 1: the node guard did not keep it", kept.Name, v1alpha1.LabelExplicitDeletion, n)
	}
	// The kubelet retries the kill on every sync; the guard calls it
	// VanishedFromAPI once its relist (after the restore's 410) has shown
	// the pod gone.
	vanished := regexp.MustCompile(`rampart_nodeguard_vetoes_total\{call="[A-Za-z]+",reason="` + nodeguard.ReasonVanished + `"\} [1-9]`)
	var metrics string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		metrics, err = env.NodeGuardMetrics(ctx, node)
		return err == nil && vanished.MatchString(metrics), nil
	})
	if err != nil {
		t.Errorf("the node guard counted no %s veto within a minute:\n%s", nodeguard.ReasonVanished, grepLines(metrics, "vetoes_total"))
	}
	if err := env.StopPodsOnRuntime(ctx, node, []string{string(kept.UID)}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return runningOf(t, env, node, kept.UID) == 0, nil
	})
	if err != nil {
		t.Errorf("pod %q still runs after crictl stopp past the guard", kept.Name)
	}
	running := map[string]int{}
	for _, c := range env.Containers(t, node) {
		if c.Running {
			running[c.PodUID]++
		}
		if c.ID == deleted.Container.ID && c.Running {
			t.Errorf("pod %q's container from before its delete runs again", deleted.Name)
		}
	}
	if want := map[string]int{string(before.UID): 1, string(deleted.UID): 1}; !maps.Equal(running, want) {
		t.Errorf("containers running on %s by pod UID: %v, want %v", node, running, want)
	}
	killing := fields.Set{"involvedObject.uid": string(before.UID), "reason": "Killing"}.String()
	if evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: killing}); err != nil || len(evs.Items) > 0 {
		t.Errorf("Killing Events on pod %q: %v %v", before.Name, evs, err)
	}
}

// runningOf counts the pod's running containers in the node's containerd.
func runningOf(t *testing.T, env *clustertest.Env, node string, uid types.UID) int {
	t.Helper()
	n := 0
	for _, c := range env.Containers(t, node) {
		if c.PodUID == string(uid) && c.Running {
			n++
		}
	}
	return n
}

// realNodePod is a pod for the real node, labelled app=NAME.
func realNodePod(name string) *corev1.Pod {
	return localcluster.RealNodePod(name, map[string]string{"app": name}, map[string]string{localcluster.RealNodeLabel: "true"})
}

// TestRestoreIntoTheKubeletTrap does the same restore with the kubelet
// left running: without --bump-revision/--mark-compacted (the trap), and
// with them. What the kubelet then does depends on timing (whether the
// restored etcd's revision passes the one the kubelet's watch resumes from
// before the watch gives up), so without the flags it is reported, not
// asserted; with them the kubelet must relist and make the node match the
// restored API (the pod made after the snapshot stopped, the one deleted
// since running again) within 90 s. It takes about 4.5 minutes, so it
// runs only when asked (subtest names without commas: kwok splits its
// --config path, in the test's TempDir, at them):
// RAMPART_SHOW_TRAP=1 go test -v -run TestRestoreIntoTheKubeletTrap.
func TestRestoreIntoTheKubeletTrap(t *testing.T) {
	if os.Getenv("RAMPART_SHOW_TRAP") == "" {
		t.Skip("about 4.5 minutes: set RAMPART_SHOW_TRAP=1 to run it")
	}
	etcdutlPath(t)
	t.Run("without bump or compaction", func(t *testing.T) {
		if matched := restoreUnderARunningKubelet(t); matched {
			t.Log("the kubelet made the node match the restored API: the trap did not spring this time")
		}
	})
	t.Run("bump and compaction", func(t *testing.T) {
		if !restoreUnderARunningKubelet(t, "--bump-revision", "1000000000", "--mark-compacted") {
			t.Error("with --bump-revision and --mark-compacted the kubelet did not make the node match the restored API within 90 s")
		}
	})
}

// restoreUnderARunningKubelet restores etcd with the kubelet left running,
// logs what the node does for 90 s, and says whether the node came to
// match the restored API: the pod made after the snapshot stopped and
// gone from the API, the one deleted since Running with a container.
func restoreUnderARunningKubelet(t *testing.T, flags ...string) (matched bool) {
	env := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 1})
	node := env.RealNodes(t, 1)[0]
	ns := env.Namespace(t)
	before := env.StartRealPod(t, node, ns, realNodePod("before"))
	deleted := env.StartRealPod(t, node, ns, realNodePod("deleted"))
	snap := filepath.Join(t.TempDir(), "s.db")
	if out, ok := rampart(t, append([]string{"etcd", "snapshot", "save", "--dir=" + filepath.Dir(snap), "--name=s.db"}, etcdFlags(env)...)...); !ok {
		t.Fatalf("snapshot save:\n%s", out)
	}
	after := env.StartRealPod(t, node, ns, realNodePod("after"))
	if out, err := env.Kubectl(t, "delete", "pod", "-n", ns, deleted.Name, "--grace-period=1"); err != nil {
		t.Fatalf("kubectl delete pod: %v: %s", err, out)
	}
	start := time.Now()
	restoreEtcd(t, env, snap, flags...)
	rctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := env.RestartControllers(rctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane back %.1fs after it stopped", time.Since(start).Seconds())
	last := ""
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		ctx := context.Background()
		state := fmt.Sprintf("before: %q; deleted: %s in the API, %d running in containerd; after: in the API %v, %d running in containerd",
			env.RealPodChange(ctx, t, before), apiPhase(ctx, env, ns, deleted.Name), runningOf(t, env, node, deleted.UID),
			apiPhase(ctx, env, ns, after.Name), runningOf(t, env, node, after.UID))
		if state != last {
			t.Logf("%5.1fs %s", time.Since(start).Seconds(), state)
			last = state
		}
		if apierrors.IsNotFound(apiErr(ctx, env, ns, after.Name)) && runningOf(t, env, node, after.UID) == 0 &&
			apiPhase(ctx, env, ns, deleted.Name) == string(corev1.PodRunning) && runningOf(t, env, node, deleted.UID) > 0 {
			return true
		}
	}
	return false
}

// apiErr is the error of a GET of the pod.
func apiErr(ctx context.Context, env *clustertest.Env, ns, name string) error {
	_, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	return err
}

// apiPhase is the pod's phase in the API, or why there is none.
func apiPhase(ctx context.Context, env *clustertest.Env, ns, name string) string {
	p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return string(p.Status.Phase)
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
