// Tests of the Helm chart (charts/rampart) as an operator uses it: helm
// lint and the values schema, the flags and rights it gives the binary, and
// helm install, upgrade and uninstall against a real control plane.
package charts_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/cli"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// chart is the chart's directory, relative to this package.
const chart = "rampart"

// releaseNamespace is where the tests install the chart: not the chart's
// usual rampart-system, to show nothing depends on that name.
const releaseNamespace = "rampart-sys"

func TestMain(m *testing.M) {
	// A plain cluster: the chart installs Rampart.
	clustertest.Main(m, localcluster.Options{Unprotected: true, Nodes: 2})
}

// chartAssets is bin/k8s with helm and the monitoring CRDs, built first
// if missing.
func chartAssets(t testing.TB) string {
	t.Helper()
	assets, err := clustertest.Assets("charts", "helm", "crds/monitoring.coreos.com_servicemonitors.yaml", "crds/monitoring.coreos.com_prometheusrules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return assets
}

// helm runs bin/k8s/helm and returns its combined output.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	assets := chartAssets(t)
	out, err := exec.Command(filepath.Join(assets, "helm"), args...).CombinedOutput()
	return string(out), err
}

// render is `helm template` of the chart with the given flags.
func render(t testing.TB, flags ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, append([]string{"template", "rampart", chart, "-n", releaseNamespace}, flags...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", flags, err, out)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
	return nil
}

func convert[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// containerArgs are the args of the first container of a Deployment.
func containerArgs(t testing.TB, objs []*unstructured.Unstructured, deployment string) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", deployment).Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("deployment %s has no container", deployment)
	}
	args, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if err != nil {
		t.Fatal(err)
	}
	return args
}

var everything = []string{
	"--set", "gateway.enabled=true",
	"--set", "gateway.clientCA.configMap=client-ca",
	"--set", "gateway.upstreams={https://10.0.0.1:6443,https://10.0.0.2:6443}",
	"--set", "manager.replicasExempt.users={bot}",
	"--set", "manager.webhookClientCA.configMap=webhook-client-ca",
	"--set", "manager.webhookClientCA.allowedNames={kube-apiserver}",
	"--set", "manager.networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
	"--set", "manager.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
	"--set", "monitoring.serviceMonitor.enabled=true",
	"--set", "monitoring.prometheusRule.enabled=true",
	"--set", "monitoring.dashboard.enabled=true",
	"--set", "gateway.trafficLog.enabled=true",
	"--set", "gateway.trafficLog.to=file",
	"--set", "manager.backup.enabled=true",
	"--set", "manager.backup.store=s3://rampart-backups/cluster-a?endpoint=https://minio.example:9000&pathStyle=true",
	"--set", "manager.backup.credentialsSecret=s3-credentials",
	"--set", "manager.backup.etcdSnapshot.secretNames={etcd-client,etcd-events-client}",
	"--set", "manager.etcdSpace.secretName=etcd-client",
}

func TestChartLints(t *testing.T) {
	for _, flags := range [][]string{nil, everything} {
		if out, err := helm(t, append([]string{"lint", "--strict", chart}, flags...)...); err != nil {
			t.Errorf("helm lint --strict %v: %v\n%s", flags, err, out)
		}
	}
}

func TestChartRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		set, want string
		flags     []string
	}{
		{set: "manager.replicas=two", want: "/manager/replicas': got string, want integer"},
		{set: "manager.budgetDisruptionTimeout=30", want: "/manager/budgetDisruptionTimeout': got number, want string"},
		{set: "manager.budgetPartitionThreshold=1.5", want: "/manager/budgetPartitionThreshold"},
		{set: "manager.certValidity=a month", want: "/manager/certValidity"},
		{set: "manager.replicasExempt.serviceAccounts={horizontal-pod-autoscaler}", want: "/manager/replicasExempt/serviceAccounts/0"},
		{set: "gateway.upstreams={10.0.0.1:6443}", want: "/gateway/upstreams/0"},
		{set: "gateway.enabeld=true", want: "additional properties 'enabeld' not allowed"},
		{set: "image.pullPolicy=Sometimes", want: "/image/pullPolicy"},
		{set: "gateway.trafficLog.to=syslog", want: "/gateway/trafficLog/to"},
		// The node guard left the chart: a values file that enables it
		// is told how to move its nodes before its pods are deleted.
		{set: "nodeGuard.enabled=true", want: "point each node's kubelet back at its runtime"},
		// 0 would keep every rotated file: the emptyDir would have no cap.
		{set: "gateway.trafficLog.maxBackups=0", want: "/gateway/trafficLog/maxBackups"},
		// A wildcard would let the manager read every Secret.
		{set: "manager.customResourceGroups={*}", want: "/manager/customResourceGroups/0"},
		{set: "manager.webhookClientCA.allowedNames={kube-apiserver}", want: "allowedNames needs manager.webhookClientCA.configMap"},
		// Only the leader writes backups, and any replica may lead: a
		// bucket, not a volume.
		{set: "manager.backup.enabled=true", want: "manager.backup.store is required"},
		{set: "manager.backup.store=/var/backups", want: "/manager/backup/store"},
		// A resourceName cannot be a wildcard: a pattern keeps it a name.
		{set: "manager.backup.etcdSnapshot.secretNames={*}", want: "/manager/backup/etcdSnapshot/secretNames/0"},
		{set: "manager.etcdSpace.secretName=*", want: "/manager/etcdSpace/secretName"},
		{set: "manager.networkPolicy.webhookFrom[0].ipblock.cidr=10.0.0.0/8", want: "additional properties 'ipblock' not allowed"},
		// The gateway forwards by constrained impersonation, which older
		// API servers do not have.
		{set: "gateway.enabled=true", want: "gateway.enabled needs Kubernetes 1.35 or later", flags: []string{"--kube-version", "1.34.2"}},
	} {
		out, err := helm(t, append([]string{"template", "rampart", chart, "--set", c.set}, c.flags...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template --set %s: err %v, want an error naming %q:\n%s", c.set, err, c.want, out)
		}
	}
}

// TestChartArgsAreFlagsOfTheBinary parses the args the chart gives each
// container with the binary's own command line, so a renamed flag or a
// malformed value fails here and not in a crash-looping pod.
func TestChartArgsAreFlagsOfTheBinary(t *testing.T) {
	objs := render(t, everything...)
	for _, name := range []string{"rampart-manager", "rampart-gateway"} {
		args := containerArgs(t, objs, name)
		for i, a := range args {
			args[i] = strings.NewReplacer("$(POD_NAME)", "rampart-gateway-0", "$(NODE_NAME)", "node-1").Replace(a)
		}
		cmd, rest, err := cli.NewRoot().Find(args)
		if err != nil || cmd.Name() != args[0] {
			t.Fatalf("%s: args %v name no rampart command: %v", name, args, err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: rampart %s rejects the chart's args %v: %v", name, args[0], rest, err)
		}
	}
}

// TestChartHasNoNodeGuard: the chart renders nothing of the node guard,
// whatever else is on (it runs as a host service: deploy/systemd), and
// an earlier values file's nodeGuard settings other than enabled are
// still accepted (the schema keeps the key).
func TestChartHasNoNodeGuard(t *testing.T) {
	for _, o := range render(t, append(everything, "--set", "nodeGuard.enabled=false", "--set", "nodeGuard.socket=/run/rampart/node-guard.sock")...) {
		if strings.Contains(o.GetName(), "node-guard") || o.GetKind() == "DaemonSet" {
			t.Errorf("the chart renders %s %s", o.GetKind(), o.GetName())
		}
	}
}

// TestChartNetworkPolicyOpensOnlyTheManagersPorts: the manager's pods take
// ingress only on the ports its container serves, the webhook port only
// from the configured peers; disabled, there is no policy.
func TestChartNetworkPolicyOpensOnlyTheManagersPorts(t *testing.T) {
	objs := render(t, everything...)
	np := convert[networkingv1.NetworkPolicy](t, find(t, objs, "NetworkPolicy", "rampart-manager"))
	deploy := convert[appsv1.Deployment](t, find(t, objs, "Deployment", "rampart-manager"))
	if !equality.Semantic.DeepEqual(np.Spec.PodSelector.MatchLabels, deploy.Spec.Selector.MatchLabels) {
		t.Errorf("the policy selects %v, the manager's pods are %v", np.Spec.PodSelector.MatchLabels, deploy.Spec.Selector.MatchLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v, want [Ingress]", np.Spec.PolicyTypes)
	}
	from := map[int32][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil {
			t.Fatalf("an ingress rule with ports %v: want one port per rule", rule.Ports)
		}
		from[rule.Ports[0].Port.IntVal] = rule.From
	}
	byName := map[string]int32{}
	for _, p := range deploy.Spec.Template.Spec.Containers[0].Ports {
		byName[p.Name] = p.ContainerPort
	}
	if len(from) != len(byName) {
		t.Errorf("the policy opens ports %v, the manager serves %v", from, byName)
	}
	webhook, metrics, probes := byName["webhook"], byName["https-metrics"], byName["probes"]
	if peers := from[webhook]; len(peers) != 1 || peers[0].IPBlock == nil || peers[0].IPBlock.CIDR != "10.0.0.0/24" {
		t.Errorf("webhook port %d open to %+v, want only webhookFrom's 10.0.0.0/24", webhook, peers)
	}
	if peers := from[metrics]; len(peers) != 1 || peers[0].NamespaceSelector == nil || peers[0].NamespaceSelector.MatchLabels["name"] != "monitoring" {
		t.Errorf("metrics port %d open to %+v, want only metricsFrom's namespace", metrics, peers)
	}
	if _, ok := from[probes]; !ok {
		t.Errorf("probe port %d closed: the kubelet could not probe the manager", probes)
	}
	for _, o := range render(t, "--set", "manager.networkPolicy.enabled=false") {
		if o.GetKind() == "NetworkPolicy" {
			t.Errorf("networkPolicy.enabled=false still renders NetworkPolicy %s", o.GetName())
		}
	}
}

// TestChartGatewayRoleIsTheGatewaysRole keeps the chart's gateway rights
// the same as those `rampart up` grants (internal/servers/gateway/rbac.go).
func TestChartGatewayRoleIsTheGatewaysRole(t *testing.T) {
	objs := render(t, everything...)
	role := convert[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", gateway.RoleName))
	if want := gateway.ClusterRole().Rules; !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("the chart's ClusterRole %s differs from gateway.ClusterRole():\nchart: %+v\ncode:  %+v", gateway.RoleName, role.Rules, want)
	}
	space := convert[rbacv1.Role](t, find(t, objs, "Role", gateway.SpaceRoleName))
	if want := gateway.SpaceRole(releaseNamespace); !equality.Semantic.DeepEqual(space.Rules, want.Rules) || space.Namespace != releaseNamespace {
		t.Errorf("the chart's Role %s differs from gateway.SpaceRole():\nchart: %+v\ncode:  %+v", gateway.SpaceRoleName, space.Rules, want.Rules)
	}
	if b := convert[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", gateway.SpaceRoleName)); b.RoleRef.Name != gateway.SpaceRoleName || len(b.Subjects) != 1 || b.Subjects[0].Name != gateway.RoleName {
		t.Errorf("the chart's RoleBinding %s binds %+v to %+v, want the gateway's service account", gateway.SpaceRoleName, b.RoleRef, b.Subjects)
	}
	groups := []string{"cert-manager.io", "example.com"}
	objs = render(t, append(slices.Clone(everything), "--set", "gateway.countCustomResourceGroups={"+strings.Join(groups, ",")+"}")...)
	custom := convert[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", gateway.CustomResourceRoleName))
	if want := gateway.CustomResourceRole(groups).Rules; !equality.Semantic.DeepEqual(custom.Rules, want) {
		t.Errorf("the chart's ClusterRole %s differs from gateway.CustomResourceRole():\nchart: %+v\ncode:  %+v", gateway.CustomResourceRoleName, custom.Rules, want)
	}
	if _, err := helm(t, "template", "rampart", chart, "--set", "gateway.enabled=true", "--set", "gateway.countCustomResourceGroups={*}"); err == nil {
		t.Error("gateway.countCustomResourceGroups={*} was accepted: it would let the gateway read every Secret")
	}
}

// hostIP is an address of this machine the API server can be pointed at
// through an EndpointSlice, which refuses loopback addresses.
func hostIP(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && ip.IP.IsGlobalUnicast() {
			return ip.IP.String()
		}
	}
	t.Fatal("this test needs a non-loopback IPv4 address: an EndpointSlice may not point at 127.0.0.1")
	return ""
}

func freePort(t testing.TB, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// chart's service account NAME, with a token the API server issues.
func serviceAccountKubeconfig(t testing.TB, env *clustertest.Env, name string) string {
	t.Helper()
	tr, err := env.Client.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for service account %s: %v", name, err)
	}
	ca, err := os.ReadFile(env.PKIFile("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: env.APIServerURL(), CertificateAuthorityData: ca}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAsPod runs `rampart ARGS...` with the args the chart gives a pod,
// then overrides (the last value of a flag wins), as service account sa.
// The returned func stops it.
func startAsPod(t testing.TB, env *clustertest.Env, sa string, args []string, overrides ...string) (stop func()) {
	t.Helper()
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	args = append(append(args, "--kubeconfig", serviceAccountKubeconfig(t, env, sa)), overrides...)
	cmd := exec.Command(rampart, args...)
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("rampart %s logs:\n%s", args[0], logs)
		}
	})
	return stop
}

// waitReady waits until url answers 200.
func waitReady(t testing.TB, what, url string) {
	t.Helper()
	poll(t, what+" to be ready", 2*time.Minute, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func poll(t testing.TB, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestChartInstallProtectsAndUninstallsCleanly installs the chart with
// helm, runs the manager exactly as the chart's pods would (its args, its
// service account, called by the API server through the chart's Service),
// shows a protected delete refused, then uninstalls and shows that nothing
// of Rampart's is left in the way.
func TestChartInstallProtectsAndUninstallsCleanly(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	kc := "--kubeconfig=" + env.Kubeconfig

	// The Prometheus operator's CRDs, so that the API server validates the
	// chart's ServiceMonitors and PrometheusRule.
	if out, err := env.Kubectl(t, "apply", "--server-side", "-f", filepath.Join(chartAssets(t), "crds")); err != nil {
		t.Fatalf("Prometheus operator CRDs: %v\n%s", err, out)
	}
	// kubectl wait fails outright ("conditions accessor error") when it
	// reads a CRD before the API server has written any condition, which
	// CI hit: poll until both say Established.
	for _, crd := range []string{"servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"} {
		poll(t, crd+" Established", time.Minute, func(context.Context) (bool, error) {
			out, err := env.Kubectl(t, "get", "crd", crd, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			return err == nil && strings.TrimSpace(out) == "True", nil
		})
	}

	// kwok runs the pods in name only: they get fake IPs no webhook call
	// could reach, so the manager runs here, with no replicas in the
	// cluster, behind an EndpointSlice of this machine's address.
	// The CA of the API server's webhook client certificate, as an admin
	// who configured the API server would publish it.
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clientCA, err := os.ReadFile(env.PKIFile("webhook-client-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(releaseNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "webhook-client-ca"},
		Data: map[string]string{"ca.crt": string(clientCA)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clientAuth := []string{"--set", "manager.webhookClientCA.configMap=webhook-client-ca", "--set", "manager.webhookClientCA.allowedNames={" + localcluster.WebhookClientName + "}"}
	out, err := helm(t, append([]string{"install", "rampart", chart, kc, "-n", releaseNamespace, "--wait", "--timeout=3m",
		"--set", "gateway.enabled=true", "--set", "monitoring.dashboard.enabled=true",
		"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true"}, clientAuth...)...)
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	if !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install did not deploy:\n%s", out)
	}
	for _, name := range []string{"rampart-manager", "rampart-gateway"} {
		d, err := env.Client.AppsV1().Deployments(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Status.AvailableReplicas != 2 {
			t.Fatalf("deployment %s after helm install --wait: %v, %d available", name, err, d.Status.AvailableReplicas)
		}
	}
	tlsBefore, err := env.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, "rampart-gateway-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := helm(t, "upgrade", "rampart", chart, kc, "-n", releaseNamespace, "--reuse-values", "--wait",
		"--set", "manager.replicas=0", "--set", "gateway.replicas=0"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	t.Run("an upgrade keeps the gateway's certificate", func(t *testing.T) {
		after, err := env.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, "rampart-gateway-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(after.Data, tlsBefore.Data) {
			t.Error("helm upgrade replaced the gateway's CA and certificate: every client's kubeconfig would stop trusting it")
		}
	})
	t.Run("the monitoring objects are installed", func(t *testing.T) {
		out, err := env.Kubectl(t, "get", "-n", releaseNamespace, "servicemonitors,prometheusrules,configmaps", "-o", "name")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, o := range []string{"servicemonitor.monitoring.coreos.com/rampart-manager", "servicemonitor.monitoring.coreos.com/rampart-gateway",
			"prometheusrule.monitoring.coreos.com/rampart", "configmap/rampart-dashboard"} {
			if !strings.Contains(out, o) {
				t.Errorf("no %s after helm install:\n%s", o, out)
			}
		}
	})
	t.Run("the default traffic policies are installed", func(t *testing.T) {
		out, err := env.Kubectl(t, "get", "trafficpolicies", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"rampart-control-plane", "rampart-node-leases", "rampart-default"} {
			if !strings.Contains(out, "trafficpolicy.rampart.io/"+p) {
				t.Errorf("no TrafficPolicy %s after helm install:\n%s", p, out)
			}
		}
		out, _ = env.Kubectl(t, "get", "trafficpolicy", "rampart-control-plane", "-o", "jsonpath={.spec.match[*].groups}")
		if !strings.Contains(out, "system:serviceaccounts:"+releaseNamespace) {
			t.Errorf("rampart-control-plane does not exempt the release namespace's service accounts: %s", out)
		}
	})

	objs := render(t, append([]string{"--set", "gateway.enabled=true"}, clientAuth...)...)
	ip := hostIP(t)
	port := freePort(t, ip)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "rampart-webhook-test", Namespace: releaseNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: "rampart-webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("webhook"), Port: ptr.To(int32(port))}},
	}
	if _, err := env.Client.DiscoveryV1().EndpointSlices(releaseNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	metrics, stopManager := startManager(t, env, containerArgs(t, objs, "rampart-manager"), ip, port)

	ns := env.Namespace(t)
	// Cascading, with a dependent: a rule only the webhook judges (the
	// manager has the API server enforce Always itself), so the denial
	// shows the API server calling the manager through the Service.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: ns, Labels: map[string]string{"rampart.io/protection": "Cascading"}}}
	cm, err = env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger-entry", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}}}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, entry, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("the API server calls the manager through the chart's Service and honours its denial", func(t *testing.T) {
		poll(t, "the webhook configuration, registered by Service", time.Minute, func(ctx context.Context) (bool, error) {
			cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
			if err != nil || len(cfg.Webhooks) == 0 {
				return false, nil
			}
			svc := cfg.Webhooks[0].ClientConfig.Service
			return svc != nil && svc.Name == "rampart-webhook" && svc.Namespace == releaseNamespace, nil
		})
		var out string
		poll(t, "the protected ConfigMap's delete to be judged", time.Minute, func(context.Context) (bool, error) {
			out, _ = env.Kubectl(t, "delete", "configmap", "-n", ns, "ledger")
			return strings.Contains(out, "denied the request"), nil
		})
		if want := "kubectl label -n " + ns + " configmap/ledger rampart.io/protection-"; !strings.Contains(out, want) {
			t.Errorf("the denial does not say how to proceed (%q):\n%s", want, out)
		}
	})
	t.Run("a denial names the chart's value as the way out", func(t *testing.T) {
		// The chart grants no custom-resource group: the manager cannot
		// tell that a protected CRD of one has no instances left.
		crd := filepath.Join(t.TempDir(), "crd.yaml")
		if err := os.WriteFile(crd, []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.unseen.example.com, labels: {rampart.io/protection: Cascading}}
spec:
  group: unseen.example.com
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]
`), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := env.Kubectl(t, "apply", "-f", crd); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Cleanup(func() {
			_, _ = env.Kubectl(t, "label", "crd", "gadgets.unseen.example.com", "rampart.io/protection-")
			_, _ = env.Kubectl(t, "delete", "crd", "gadgets.unseen.example.com", "--wait=false")
		})
		var out string
		poll(t, "the protected CRD's delete to be judged", time.Minute, func(context.Context) (bool, error) {
			out, _ = env.Kubectl(t, "delete", "crd", "gadgets.unseen.example.com", "--dry-run=server")
			return strings.Contains(out, "denied the request"), nil
		})
		if want := "grant group unseen.example.com in the chart's manager.customResourceGroups"; !strings.Contains(out, want) || strings.Contains(out, "rampart up") {
			t.Errorf("the denial does not name the chart's value (%q) alone:\n%s", want, out)
		}
	})
	t.Run("a review from anyone but the API server is refused", func(t *testing.T) {
		// As a pod would call the manager: past the Service, trusting
		// the registered CA, with no client certificate.
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle)
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool, ServerName: "rampart-webhook." + releaseNamespace + ".svc", MinVersion: tls.VersionTLS12}}}
		review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"forged","operation":"DELETE",` +
			`"kind":{"version":"v1","kind":"ConfigMap"},"resource":{"version":"v1","resource":"configmaps"},"namespace":"` + ns + `","name":"ledger"}}`
		resp, err := c.Post(fmt.Sprintf("https://%s/validate/deletion", net.JoinHostPort(ip, strconv.Itoa(port))), "application/json", strings.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a review without the API server's client certificate: %s %s, want 401", resp.Status, body)
		}
	})
	t.Run("metrics are served only to rampart-metrics-reader", func(t *testing.T) {
		checkMetricsNeedTheReaderRole(t, env, metrics)
	})
	t.Run("metrics refuse CBC-SHA1 suites", func(t *testing.T) {
		dial := func(suites ...uint16) error {
			conn, err := tls.Dial("tcp", metrics, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: suites}) //nolint:gosec // only the suite matters
			if err == nil {
				conn.Close()
			}
			return err
		}
		if err := dial(tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
			tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA); err == nil {
			t.Error("the metrics server accepted a client offering only CBC-SHA1 suites")
		}
		if err := dial(tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256); err != nil {
			t.Errorf("TLS 1.2 with an ECDHE AES-GCM suite: %v", err)
		}
	})
	t.Run("the chart's ClusterRole owns the webhook configurations", func(t *testing.T) {
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		refs := cfg.OwnerReferences
		if len(refs) != 1 || refs[0].Kind != "ClusterRole" || refs[0].Name != "rampart-manager" {
			t.Errorf("owner references of rampart-validating: %+v", refs)
		}
	})
	t.Run("the gateway runs with the chart's rights and certificate", func(t *testing.T) {
		checkGatewayAsPod(t, env, containerArgs(t, objs, "rampart-gateway"))
	})

	// An Always ProtectionPolicy, compiled too: its protection outlives
	// the manager but not Rampart's uninstall, though the policy stays.
	policyFile := filepath.Join(t.TempDir(), "vault.yaml")
	if err := os.WriteFile(policyFile, []byte(`apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: chart-vault}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  objectSelector: {matchLabels: {vault: "yes"}}
  protection: Always
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(t, "apply", "-f", policyFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	vault := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vault", Namespace: ns, Labels: map[string]string{"vault": "yes"}}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, vault, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("the manager has the API server enforce the label rules itself", func(t *testing.T) {
		poll(t, "the compiled label rules applied and in force", time.Minute, func(ctx context.Context) (bool, error) {
			list, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: "rampart.io/applied-by=manager"})
			if err != nil {
				return false, nil
			}
			var names []string
			for _, p := range list.Items {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"chart-vault.deletion.policy.rampart.io", "deletion.rampart.io", "probe.compiled.rampart.io", "replicas.rampart.io", "saved-pods.rampart.io"}) {
				return false, nil
			}
			// Applied is not enforced: the manager records the label
			// rules and the policy on the probe once every API server
			// has loaded them.
			for _, p := range list.Items {
				if p.Name == "probe.compiled.rampart.io" {
					rec := p.Annotations["rampart.io/in-force"]
					return strings.Contains(rec, `"labels":`) && strings.Contains(rec, `"policy/chart-vault":`), nil
				}
			}
			return false, nil
		})
	})
	always := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "charter", Namespace: ns, Labels: map[string]string{"rampart.io/protection": "Always"}}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, always, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A NodeDisruptionBudget over every node, at its floor: with the
	// chart's manager a cordon is refused; helm uninstall does not wait on
	// it, and leaves the nodes free (below).
	nodeList, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodeList.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	node := nodeList.Items[0].Name
	ndb := filepath.Join(t.TempDir(), "floor.yaml")
	if err := os.WriteFile(ndb, []byte("apiVersion: rampart.io/v1alpha1\nkind: NodeDisruptionBudget\nmetadata: {name: chart-floor}\nspec: {nodeSelector: {}, minAvailable: \"100%\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(t, "apply", "-f", ndb); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cordon := func(on bool) error {
		_, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)), metav1.PatchOptions{})
		return err
	}
	if err := cordon(true); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "NodeDisruptionBudget chart-floor") {
		t.Fatalf("a cordon under a NodeDisruptionBudget at its floor, with the chart's manager: %v", err)
	}

	// With the manager gone, the protected delete fails closed, and an
	// Always-labelled object is still refused, by the API server itself ...
	stopManager()
	if out, err := env.Kubectl(t, "delete", "configmap", "-n", ns, "ledger", "--dry-run=server"); err == nil {
		t.Fatalf("a protected delete passed while the manager was down:\n%s", out)
	}
	if out, err := env.Kubectl(t, "delete", "configmap", "-n", ns, "charter", "--dry-run=server"); err == nil ||
		!strings.Contains(out, "ValidatingAdmissionPolicy 'deletion.rampart.io'") || !strings.Contains(out, "kubectl label -n "+ns+" configmap/charter rampart.io/protection-") {
		t.Errorf("with the manager down, deleting an Always-labelled ConfigMap: %v\n%s; want the compiled policy's refusal", err, out)
	}
	if out, err := env.Kubectl(t, "delete", "configmap", "-n", ns, "vault", "--dry-run=server"); err == nil ||
		!strings.Contains(out, "ValidatingAdmissionPolicy 'chart-vault.deletion.policy.rampart.io'") {
		t.Errorf("with the manager down, deleting a ConfigMap an Always policy selects: %v\n%s; want the compiled policy's refusal", err, out)
	}
	// ... until helm uninstall removes Rampart, its webhooks with it.
	if out, err := helm(t, "uninstall", "rampart", kc, "-n", releaseNamespace, "--wait"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	t.Run("helm uninstall leaves no webhook behind", func(t *testing.T) {
		// Every compiled policy goes; a ProtectionPolicy's binding stays
		// with its ProtectionPolicy (the CRDs stay), bound to nothing.
		poll(t, "the garbage collector to delete the webhook configurations and the compiled policies", time.Minute, func(ctx context.Context) (bool, error) {
			_, errV := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
			policies, errP := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: "rampart.io/applied-by=manager"})
			bindings, errB := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{LabelSelector: "rampart.io/applied-by=manager"})
			if errB != nil {
				return false, nil
			}
			for _, b := range bindings.Items {
				if len(b.OwnerReferences) != 1 || b.OwnerReferences[0].Kind != "ProtectionPolicy" {
					return false, nil
				}
			}
			return apierrors.IsNotFound(errV) && errP == nil && len(policies.Items) == 0, nil
		})
		if out, err := env.Kubectl(t, "delete", "configmap", "-n", ns, "ledger"); err != nil {
			t.Errorf("delete after helm uninstall: %v\n%s", err, out)
		}
		// The API server drops a deleted policy from its own cache a
		// moment later.
		poll(t, "the Always-labelled ConfigMap deletable once the compiled policies are gone", 30*time.Second, func(context.Context) (bool, error) {
			_, err := env.Kubectl(t, "delete", "configmap", "-n", ns, "charter")
			return err == nil, nil
		})
		poll(t, "the ConfigMap an Always policy selects deletable, the policy still there", 30*time.Second, func(context.Context) (bool, error) {
			_, err := env.Kubectl(t, "delete", "configmap", "-n", ns, "vault")
			return err == nil, nil
		})
		if out, err := env.Kubectl(t, "get", "protectionpolicy", "chart-vault"); err != nil {
			t.Errorf("the ProtectionPolicy is gone with helm uninstall: %v\n%s", err, out)
		}
		// The NodeDisruptionBudget stays (the CRDs stay), holding nothing.
		if err := cordon(true); err != nil {
			t.Errorf("a cordon after helm uninstall, the NodeDisruptionBudget still there: %v", err)
		}
		if err := cordon(false); err != nil {
			t.Error(err)
		}
		if out, err := env.Kubectl(t, "delete", "-f", ndb); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	t.Run("helm uninstall keeps the CRDs and so every policy", func(t *testing.T) {
		if out, err := env.Kubectl(t, "get", "crd", "trafficpolicies.rampart.io", "protectionpolicies.rampart.io"); err != nil {
			t.Errorf("CRDs gone after helm uninstall: %v\n%s", err, out)
		}
	})
	t.Run("deleting the ProtectionPolicy takes the rest of its compiled policy", func(t *testing.T) {
		if out, err := env.Kubectl(t, "delete", "protectionpolicy", "chart-vault"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		poll(t, "the garbage collector to delete the policy's binding", time.Minute, func(ctx context.Context) (bool, error) {
			bindings, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{LabelSelector: "rampart.io/applied-by=manager"})
			return err == nil && len(bindings.Items) == 0, nil
		})
	})
}

// startManager runs the manager with the chart's args and service account,
// serving its webhooks on ip:port, and waits until it is ready.
// It returns the metrics address and a func that stops it.
func startManager(t *testing.T, env *clustertest.Env, args []string, ip string, port int) (metrics string, stop func()) {
	t.Helper()
	probes := freePort(t, "127.0.0.1")
	metrics = "127.0.0.1:" + strconv.Itoa(freePort(t, "127.0.0.1"))
	// The chart mounts the client CA's ConfigMap; here it is the file.
	stop = startAsPod(t, env, "rampart-manager", args, "--webhook-client-ca="+env.PKIFile("webhook-client-ca.crt"),
		"--webhook-bind-host="+ip, "--webhook-port="+strconv.Itoa(port), "--cert-dir="+t.TempDir(),
		"--metrics-bind-address="+metrics, "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probes))
	waitReady(t, "the manager", fmt.Sprintf("http://127.0.0.1:%d/readyz", probes))
	return metrics, stop
}

// appToken creates service account name in ns and returns a token of it.
func appToken(t testing.TB, env *clustertest.Env, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// checkMetricsNeedTheReaderRole scrapes the manager's metrics as the
// chart's ServiceMonitor does (HTTPS, a service account token) with and
// without the chart's rampart-metrics-reader.
func checkMetricsNeedTheReaderRole(t *testing.T, env *clustertest.Env, addr string) {
	ctx := context.Background()
	ns := env.Namespace(t)
	prometheus, nobody := appToken(t, env, ns, "prometheus"), appToken(t, env, ns, "nobody")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rampart-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	scrape := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The ServiceMonitor skips verification too: the manager serves
		// metrics with a certificate of its own making.
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("scrape %s: %v", addr, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	var code int
	var body string
	poll(t, "a scrape bound to rampart-metrics-reader to pass", time.Minute, func(context.Context) (bool, error) {
		code, body = scrape(prometheus)
		return code == http.StatusOK, nil
	})
	if !strings.Contains(body, `rampart_admission_denials_total{`) {
		t.Errorf("the manager's metrics do not count the denial:\n%.2000s", body)
	}
	if code, _ := scrape(nobody); code != http.StatusForbidden {
		t.Errorf("a service account without rampart-metrics-reader scraped the metrics: %d, want 403", code)
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("an anonymous scrape: %d, want 401", code)
	}
}

// checkGatewayAsPod runs the gateway with the chart's args, service
// account and generated certificate, and shows that a client trusting the
// chart's CA gets through it, that the default policy's breaker refuses it
// when opened, and that the gateway may write its breaker status.
func checkGatewayAsPod(t *testing.T, env *clustertest.Env, args []string) {
	ctx := context.Background()
	secret, err := env.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, "rampart-gateway-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), secret.Data[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	listen, metrics := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$(POD_NAME)", "rampart-gateway-test")
	}
	startAsPod(t, env, "rampart-gateway", args,
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-private-key-file="+filepath.Join(dir, "tls.key"),
		"--listen=127.0.0.1:"+strconv.Itoa(listen), "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metrics),
		"--upstreams="+env.APIServerURL())
	waitReady(t, "the gateway", fmt.Sprintf("http://127.0.0.1:%d/readyz", metrics))

	// An application's service account, allowed to read its namespace.
	ns := env.Namespace(t)
	token := appToken(t, env, ns, "app")
	if _, err := env.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "app-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "app", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The client checks the gateway's certificate against the chart's CA
	// under the Service's name, as a pod in the cluster would.
	transport, err := rest.TransportFor(&rest.Config{BearerToken: token, TLSClientConfig: rest.TLSClientConfig{
		CAData: secret.Data["ca.crt"], ServerName: "rampart-gateway." + releaseNamespace + ".svc"}})
	if err != nil {
		t.Fatal(err)
	}
	list := func() (int, string) {
		t.Helper()
		resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Get(
			fmt.Sprintf("https://127.0.0.1:%d/api/v1/namespaces/%s/configmaps", listen, ns))
		if err != nil {
			t.Fatalf("LIST through the gateway: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := list(); code != http.StatusOK {
		t.Fatalf("LIST through the gateway as an application: %d\n%s", code, body)
	}
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	breaker := func(verb string) {
		t.Helper()
		if out, err := exec.Command(rampart, "gateway", "breaker", verb, "--policy", "rampart-default", "--kubeconfig", env.Kubeconfig).CombinedOutput(); err != nil {
			t.Fatalf("rampart gateway breaker %s: %v\n%s", verb, err, out)
		}
	}
	breaker("open")
	defer breaker("close")
	var code int
	var body string
	poll(t, "the open breaker to refuse the application", time.Minute, func(context.Context) (bool, error) {
		code, body = list()
		return code == http.StatusTooManyRequests, nil
	})
	if !strings.Contains(body, "rampart gateway breaker close --policy rampart-default") {
		t.Errorf("the refusal does not say how to close the breaker:\n%s", body)
	}
	poll(t, "the gateway's status.breakers entry", time.Minute, func(context.Context) (bool, error) {
		out, _ := env.Kubectl(t, "get", "trafficpolicy", "rampart-default", "-o",
			`jsonpath={.status.breakers[?(@.gateway=="rampart-gateway-test")].state}`)
		return out == "Open", nil
	})
}

// The traffic log: off by default; to stderr, a flag and nothing else; to
// a file, the file on an emptyDir capped at what rotation keeps.
func TestChartGatewayTrafficLog(t *testing.T) {
	on := []string{"--set", "gateway.enabled=true"}
	volume := func(objs []*unstructured.Unstructured) map[string]any {
		vols, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", "rampart-gateway").Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			if v := v.(map[string]any); v["name"] == "traffic-log" {
				return v
			}
		}
		return nil
	}
	logArgs := func(objs []*unstructured.Unstructured) []string {
		var out []string
		for _, a := range containerArgs(t, objs, "rampart-gateway") {
			if strings.HasPrefix(a, "--traffic-log") {
				out = append(out, a)
			}
		}
		return out
	}
	off := render(t, on...)
	if a, v := logArgs(off), volume(off); a != nil || v != nil {
		t.Errorf("by default: traffic log args %v, volume %v; want none", a, v)
	}
	stderr := render(t, append(slices.Clone(on), "--set", "gateway.trafficLog.enabled=true", "--set", "gateway.trafficLog.sample=policy")...)
	if a, v := logArgs(stderr), volume(stderr); !slices.Equal(a, []string{"--traffic-log=-", "--traffic-log-sample=policy", "--traffic-log-max-size=100", "--traffic-log-max-backups=5"}) || v != nil {
		t.Errorf("to stderr: args %v, volume %v", a, v)
	}
	file := render(t, append(slices.Clone(on), "--set", "gateway.trafficLog.enabled=true", "--set", "gateway.trafficLog.to=file")...)
	if a := logArgs(file); len(a) == 0 || a[0] != "--traffic-log=/var/log/rampart/traffic.log" {
		t.Errorf("to a file: args %v", a)
	}
	if size, _, _ := unstructured.NestedString(volume(file), "emptyDir", "sizeLimit"); size != "600Mi" {
		t.Errorf("to a file: emptyDir sizeLimit %q, want 600Mi (100 MB × 6 files)", size)
	}
}

// TestChartEtcdSnapshotSecrets: manager.backup.etcdSnapshot.secretNames
// gives the manager get on those Secrets alone, by name, in its own
// namespace, and tells it those are the only ones Backups may name;
// without it, no such Role and no flag.
func TestChartEtcdSnapshotSecrets(t *testing.T) {
	checkEtcdSecretGrant(t, "rampart-manager-etcd-snapshot", []string{"etcd-client", "etcd-events-client"}, "--etcd-snapshot-secrets=etcd-client,etcd-events-client",
		"--set", "manager.backup.enabled=true", "--set", "manager.backup.store=s3://backups/p?endpoint=https://minio:9000")
}

// TestChartEtcdSpaceSecret: manager.etcdSpace.secretName gives the
// manager get on that Secret alone, by name, in its own namespace, and
// has it watch etcd's space with it; without it, no such Role and no
// flag.
func TestChartEtcdSpaceSecret(t *testing.T) {
	checkEtcdSecretGrant(t, "rampart-manager-etcd-space", []string{"etcd-client"}, "--etcd-space-secret=etcd-client")
}

// checkEtcdSecretGrant: rendered with everything, the Role and
// RoleBinding named role grant the manager get on the Secrets names
// alone, and the manager has flag; rendered with without (the same
// values but the Secrets), neither the Role nor the flag.
func checkEtcdSecretGrant(t *testing.T, role string, names []string, flag string, without ...string) {
	t.Helper()
	objs := render(t, everything...)
	r := convert[rbacv1.Role](t, find(t, objs, "Role", role))
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: names, Verbs: []string{"get"}}}
	if r.Namespace != releaseNamespace || !reflect.DeepEqual(r.Rules, want) {
		t.Errorf("Role %s in %q: %+v, want %+v", role, r.Namespace, r.Rules, want)
	}
	binding := convert[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", role))
	if binding.RoleRef.Name != role || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "rampart-manager" {
		t.Errorf("RoleBinding %+v", binding)
	}
	if args := containerArgs(t, objs, "rampart-manager"); !slices.Contains(args, flag) {
		t.Errorf("manager args %v lack %s", args, flag)
	}
	name, _, _ := strings.Cut(flag, "=")
	objs = render(t, without...)
	for _, o := range objs {
		if o.GetName() == role {
			t.Errorf("%s %s rendered without the Secrets' value", o.GetKind(), role)
		}
	}
	if args := strings.Join(containerArgs(t, objs, "rampart-manager"), " "); strings.Contains(args, name) {
		t.Errorf("manager args %q have %s without the Secrets' value", args, name)
	}
}
