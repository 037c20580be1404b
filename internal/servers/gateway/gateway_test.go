package gateway_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
)

// One cluster for the package: two API servers on one etcd, the gateway in
// front of them, and kube-controller-manager, kube-scheduler and kwok
// talking to the API servers only through the gateway.
func TestMain(m *testing.M) {
	opts := localcluster.Options{Unprotected: true, APIServers: 2, Gateway: true, ComponentsViaGateway: true,
		GatewayCountCustomResourceGroups: []string{countedGroup}}
	if os.Getenv("GATEWAY_BENCH_PROFILE") != "" {
		// BenchmarkGatewayVsDirect profiles the gateway process.
		opts.GatewayArgs = []string{"--profiling"}
	}
	clustertest.Main(m, opts)
}

// viaGateway is the admin configuration through the gateway.
func viaGateway(t testing.TB, env *clustertest.Env) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.GatewayKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // the gateway limits, not the client
	return cfg
}

// userConfig is a client certificate for user in groups, through the
// gateway, issued by the cluster's client CA as an administrator would.
func userConfig(t testing.TB, env *clustertest.Env, user string, groups ...string) *rest.Config {
	t.Helper()
	ca, err := pki.Load(strings.TrimSuffix(env.PKIFile("ca.crt"), ".crt"))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(pki.Request{CommonName: user, Organization: groups, Client: true, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	key, err := kp.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: env.GatewayURL(), QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: kp.CertPEM(), KeyData: key}}
}

func clientFor(t testing.TB, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubectl runs the cluster's kubectl with a kubeconfig and extra args.
func kubectl(t testing.TB, env *clustertest.Env, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(env.KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

func TestKubectlThroughGateway(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	kc := env.GatewayKubeconfig()
	// The gateway's admin is cluster-admin by RBAC, not system:masters,
	// which the gateway does not forward.
	if out, err := kubectl(t, env, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); err != nil || out != `rampart-admin ["rampart:gateway-admins","system:authenticated"]` {
		t.Fatalf("kubectl auth whoami through the gateway: %q, %v; want the admin's own identity", out, err)
	}
	if out, err := kubectl(t, env, kc, "-n", ns, "create", "configmap", "via-gateway", "--from-literal=k=v"); err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, out)
	}
	if out, err := kubectl(t, env, kc, "-n", ns, "get", "configmap", "via-gateway", "-o", "jsonpath={.data.k}"); err != nil || out != "v" {
		t.Fatalf("kubectl get: %q, %v", out, err)
	}
	if out, err := kubectl(t, env, kc, "-n", ns, "delete", "configmap", "via-gateway"); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	// The watch ends at the request timeout; 8 s leaves room for a loaded
	// CI machine to serve the initial list (2 s did not, once).
	if out, err := kubectl(t, env, kc, "-n", ns, "get", "configmaps", "--watch", "--request-timeout=8s"); !strings.Contains(out, "kube-root-ca.crt") {
		t.Fatalf("kubectl get --watch through the gateway: %v\n%s", err, out)
	}
	// The direct kubeconfig still goes to the first API server.
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil || cfg.Host != env.APIServerURLs()[0] {
		t.Fatalf("DIR/kubeconfig names %s (%v), want the first API server", cfg.Host, err)
	}

	// A service account's token works through the gateway as it would
	// directly: the gateway asks the API server with a TokenReview.
	if out, err := kubectl(t, env, env.Kubeconfig, "-n", ns, "create", "serviceaccount", "robot"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	token, err := kubectl(t, env, env.Kubeconfig, "-n", ns, "create", "token", "robot")
	if err != nil {
		t.Fatalf("%v\n%s", err, token)
	}
	out, err := exec.Command(env.KubectlPath(), "--server", env.GatewayURL(), "--certificate-authority", env.PKIFile("ca.crt"),
		"--token", strings.TrimSpace(token), "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
	if err != nil || string(out) != "system:serviceaccount:"+ns+":robot" {
		t.Fatalf("whoami with a service-account token through the gateway: %q, %v", out, err)
	}
	out, _ = exec.Command(env.KubectlPath(), "--server", env.GatewayURL(), "--certificate-authority", env.PKIFile("ca.crt"),
		"--token", "not-a-token", "get", "pods").CombinedOutput()
	if !strings.Contains(string(out), "You must be logged in") || !strings.Contains(string(out), "invalid bearer token") {
		t.Fatalf("a bad token through the gateway: %s, want Unauthorized", out)
	}
}

// kube-controller-manager, kube-scheduler and kwok reach the API servers
// only through the gateway in this package's cluster; a Deployment still
// gets its pods created, scheduled and Running.
func TestClusterComponentsWorkThroughGateway(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	runDeployment(t, env, ns, "web", 5)
	metrics := scrape(t, env)
	for _, want := range []string{
		`rampart_gateway_top_client_requests{client="system:kube-scheduler"}`,
		`rampart_gateway_top_client_requests{client="kwok"}`,
		`rampart_gateway_requests_total{code="201",policy="none",resource="pods/binding",verb="create"}`,
	} {
		if metric(metrics, want) <= 0 {
			t.Errorf("gateway metrics lack %s: the component does not go through the gateway", want)
		}
	}
	// Both API servers take a share.
	for _, u := range env.APIServerURLs() {
		series := `rampart_gateway_upstream_requests_total{pool="default",upstream="` + strings.TrimPrefix(u, "https://") + `"}`
		if n := metric(metrics, series); n < 10 {
			t.Errorf("%s = %v: the gateway does not spread requests over both API servers", series, n)
		}
	}
}

// runDeployment creates a Deployment of replicas pods with the admin's
// direct client and waits until they all run: the controller manager,
// the scheduler and kwok have done their part.
func runDeployment(t *testing.T, env *clustertest.Env, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
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
	if _, err := env.Client.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, ns, "app="+name, int(replicas), 60*time.Second)
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// scrape reads the gateway's Prometheus metrics.
func scrape(t testing.TB, env *clustertest.Env) string {
	t.Helper()
	resp, err := http.Get(env.GatewayMetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// metric is the value of the series named exactly by series, or -1.
func metric(text, series string) float64 {
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// An informer through the gateway lists, watches, and keeps its cache
// complete across a restart of the gateway: what it missed while the
// gateway was down arrives once it is back.
func TestInformerReconnectsAcrossGatewayRestart(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(clientFor(t, viaGateway(t, env)), 0, informers.WithNamespace(ns))
	cms := factory.Core().V1().ConfigMaps()
	informer := cms.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync through the gateway")
	}
	create := func(name string) {
		t.Helper()
		_, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := func(name string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			_, err := cms.Lister().ConfigMaps(ns).Get(name)
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("the informer never saw configmap %s", name)
		}
	}
	create("before")
	seen("before")

	if err := env.StopComponent(localcluster.GatewayName); err != nil {
		t.Fatal(err)
	}
	create("while-down")
	if err := env.StartGateway(ctx); err != nil {
		t.Fatal(err)
	}
	seen("while-down")
	create("after")
	seen("after")
}
