package localcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// This package's cluster is unprotected: it shows the control plane itself
// behaves like a real one (scheduling, garbage collection, namespace
// deletion) and what happens without Rampart.
func TestMain(m *testing.M) {
	clustertest.Main(m, localcluster.Options{Unprotected: true})
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			},
		},
	}
}

func TestDeploymentPodsRunOnSimulatedNodes(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	start := time.Now()
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, deployment("web", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := env.WaitPodsRunning(t, ns, "app=web", 3, 30*time.Second)
	t.Logf("3 pods Running %.1fs after the Deployment was created", time.Since(start).Seconds())
	for _, p := range pods {
		if !strings.HasPrefix(p.Spec.NodeName, "kwok-node-") {
			t.Errorf("pod %s scheduled to %q, want a simulated node", p.Name, p.Spec.NodeName)
		}
		if p.Status.PodIP == "" {
			t.Errorf("pod %s has no IP", p.Name)
		}
	}
}

func TestGarbageCollectorCascadesDeploymentDeletion(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, deployment("api", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, ns, "app=api", 3, 30*time.Second)
	// kubectl's default: background propagation, done by the garbage
	// collector in kube-controller-manager.
	if out, err := env.Kubectl(t, "delete", "-n", ns, "deployment/api"); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	waitFor(t, "ReplicaSets and pods garbage-collected", func(ctx context.Context) bool {
		rs, err1 := env.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		pods, err2 := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil && len(rs.Items) == 0 && len(pods.Items) == 0
	})
}

func TestNamespaceDeletionRemovesContents(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed", Labels: map[string]string{"rampart.io/protection": "Always"}}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.AppsV1().Deployments("doomed").Create(ctx, deployment("db", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, "doomed", "app=db", 2, 30*time.Second)
	// Unprotected, the label means nothing: the delete goes through and the
	// namespace controller removes everything inside.
	if out, err := env.Kubectl(t, "delete", "namespace", "doomed", "--wait=false"); err != nil {
		t.Fatalf("unprotected cluster refused the delete: %v\n%s", err, out)
	}
	waitFor(t, "namespace and its pods gone", func(ctx context.Context) bool {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestClustersRunSideBySideAndStopCompletely(t *testing.T) {
	shared := clustertest.Get(t)
	own := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 1})
	if own.APIServerURL() == shared.APIServerURL() {
		t.Fatal("two clusters share an API server address")
	}
	for _, env := range []*clustertest.Env{shared, own} {
		if _, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatalf("cluster at %s: %v", env.APIServerURL(), err)
		}
	}
	running, err := localcluster.Running(own.Dir)
	if err != nil || len(running) != 5 {
		t.Fatalf("recorded running processes = %v (err %v), want 5 components (no manager: unprotected)", running, err)
	}
	pids := pidsOf(t, own.Dir)
	if err := localcluster.Stop(own.Dir); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if clustertest.ProcessAlive(pid) {
			t.Errorf("pid %d still runs after Stop", pid)
		}
	}
	// The shared cluster is untouched.
	if _, err := shared.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("stopping one cluster broke the other: %v", err)
	}
}

// kwok reads --config as a comma-separated list: a cluster directory with a
// comma in its path must still start (the subtest's name puts one into its
// TempDir).
func TestClusterStartsInDirectoryWithComma(t *testing.T) {
	t.Run("dir,with,commas", func(t *testing.T) {
		env := clustertest.Start(t, localcluster.Options{Unprotected: true, Nodes: 1})
		if !strings.Contains(env.Dir, ",") {
			t.Fatalf("cluster dir %q has no comma: the test proves nothing", env.Dir)
		}
		nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: localcluster.NodeLabel})
		if err != nil || len(nodes.Items) != 1 {
			t.Fatalf("simulated nodes = %v (err %v), want 1 made Ready by kwok", nodes, err)
		}
	})
}

func TestMissingAssetsNameTheFix(t *testing.T) {
	err := localcluster.CheckAssets(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make assets") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckAssets on an empty dir = %v, want one line naming `make assets`", err)
	}
}

func pidsOf(t *testing.T, dir string) []int {
	t.Helper()
	running, err := localcluster.Running(dir)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range running {
		pids = append(pids, p.PID)
	}
	return pids
}

func waitFor(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true,
		func(ctx context.Context) (bool, error) { return cond(ctx), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
