package localcluster

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	chart "github.com/rampart-io/rampart/charts/rampart"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// gatewayKubeconfig is the admin kubeconfig that goes through the gateway.
const gatewayKubeconfig = "kubeconfig-gateway"

// GatewayName is the gateway's process name.
const GatewayName = "rampart-gateway"

// gatewayID is the gateway's own identity towards the API servers.
var gatewayID = identity{"kubeconfigs/rampart-gateway.kubeconfig", gateway.RoleName, nil}

// GatewayAdminsGroup is the group of the identities that act as
// cluster-admin through the gateway (the admin's gateway kubeconfig, and
// kwok with ComponentsViaGateway): the gateway does not forward members
// of system:masters, which the admin kubeconfig to the API server keeps.
const GatewayAdminsGroup = "rampart:gateway-admins"

// gatewayAdminsBinding makes GatewayAdminsGroup cluster-admin.
func gatewayAdminsBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: GatewayAdminsGroup},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: GatewayAdminsGroup}},
	}
}

func (c *Cluster) assignGatewayPorts(p []int) {
	n := max(c.opts.APIServers, 1) - 1
	c.ports.moreAPIServers = p[:n]
	if c.opts.Gateway {
		c.ports.gateway, c.ports.gatewayMetrics = p[n], p[n+1]
	}
}

func (c *Cluster) startMoreAPIServers(ctx context.Context) error {
	for i, port := range c.ports.moreAPIServers {
		if err := c.startAPIServerOn(ctx, APIServerName(i+1), port, "audit-"+strconv.Itoa(i+1)+".log"); err != nil {
			return err
		}
	}
	return nil
}

// APIServerURLs are every API server's address.
func (c *Cluster) APIServerURLs() []string {
	out := []string{c.APIServerURL()}
	for _, p := range c.ports.moreAPIServers {
		out = append(out, "https://127.0.0.1:"+strconv.Itoa(p))
	}
	return out
}

// GatewayURL is the gateway's address ("" without a gateway).
func (c *Cluster) GatewayURL() string {
	if c.ports.gateway == 0 {
		return ""
	}
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.gateway)
}

// GatewayTrafficLog is the gateway's traffic log, every request it
// judged (read it with `rampart traffic profile`).
func (c *Cluster) GatewayTrafficLog() string { return c.path("logs", "gateway-traffic.log") }

// GatewayKubeconfig is the admin kubeconfig through the gateway.
func (c *Cluster) GatewayKubeconfig() string { return c.path(gatewayKubeconfig) }

// GatewayMetricsURL is the gateway's Prometheus endpoint.
func (c *Cluster) GatewayMetricsURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(c.ports.gatewayMetrics) + "/metrics"
}

// serverFor is the server a kubeconfig file names: the gateway for the
// gateway kubeconfig and, if asked, for the cluster's own components.
func (c *Cluster) serverFor(file string) string {
	if file == gatewayKubeconfig {
		return c.GatewayURL()
	}
	if c.opts.ComponentsViaGateway && c.opts.Gateway {
		switch file {
		case kcmID.file, schedulerID.file, kwokID.file:
			return c.GatewayURL()
		}
	}
	return c.APIServerURL()
}

// makeGatewayPKI issues the gateway's serving certificate (by the cluster
// CA, so kubeconfigs trust it unchanged), its client identity, and the
// admin kubeconfig through it.
func (c *Cluster) makeGatewayPKI(ca *pki.KeyPair, now time.Time) error {
	if !c.opts.Gateway {
		return nil
	}
	serving, err := ca.Issue(pki.Request{CommonName: "rampart-gateway", Hosts: []string{"127.0.0.1", "localhost"}, Now: now, Validity: certValidity})
	if err != nil {
		return err
	}
	if err := serving.Write(c.pkiFile("gateway")); err != nil {
		return err
	}
	for _, id := range []identity{gatewayID, {gatewayKubeconfig, adminID.user, []string{GatewayAdminsGroup}}} {
		kp, err := ca.Issue(pki.Request{CommonName: id.user, Organization: id.groups, Client: true, Now: now, Validity: certValidity})
		if err != nil {
			return err
		}
		if err := c.writeKubeconfig(id.file, ca, kp); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) gatewaySteps() []step {
	if !c.opts.Gateway {
		return nil
	}
	return []step{
		{"gateway CRD and RBAC", c.installGateway},
		{"rampart gateway", c.StartGateway},
	}
}

// installGateway applies the TrafficPolicy CRD, the gateway's RBAC and,
// on a protected cluster, the default TrafficPolicies.
func (c *Cluster) installGateway(ctx context.Context) error {
	all, err := manifests()
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, o := range all {
		if o.GetKind() == "CustomResourceDefinition" && strings.HasPrefix(o.GetName(), gateway.TrafficPolicies.Resource+".") {
			objs = append(objs, o)
		}
	}
	// Rampart's namespace, for the Role that lets the gateway read the
	// manager's look at etcd's space (its brake).
	objs = append(objs, all[0])
	rbac := []runtime.Object{gateway.ClusterRole(), gateway.ClusterRoleBinding(gatewayID.user), gatewayAdminsBinding(),
		gateway.SpaceRole(ManagerNamespace), gateway.SpaceRoleBinding(ManagerNamespace, gatewayID.user)}
	if role := gateway.CustomResourceRole(c.opts.GatewayCountCustomResourceGroups); role != nil {
		rbac = append(rbac, role, gateway.CustomResourceRoleBinding(gatewayID.user))
	}
	for _, o := range rbac {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	cl, err := c.applyAll(ctx, objs)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(objs[0].GroupVersionKind())
		if err := cl.Get(ctx, client.ObjectKey{Name: objs[0].GetName()}, crd); err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		return established(conds), nil
	})
	if err != nil || c.opts.Unprotected {
		return err
	}
	policies, err := decodeManifests("charts/rampart/files/gateway-policies.yaml", chart.GatewayPolicies)
	if err != nil {
		return err
	}
	// Established is not yet served everywhere: retry until the policies
	// are accepted, then fail with the API server's reason.
	var applyErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, applyErr = c.applyAll(ctx, policies)
		return applyErr == nil, nil
	}); err != nil {
		return fmt.Errorf("default TrafficPolicies: %w", cmp.Or(applyErr, err))
	}
	return nil
}

// StartGateway starts `rampart gateway` in front of every API server (in
// its pools: Options.GatewayPools, or SetGatewayPools) and
// waits until it has loaded the TrafficPolicies. After StopComponent it
// starts the gateway again on the same address.
func (c *Cluster) StartGateway(ctx context.Context) error {
	c.forgetStopped(GatewayName)
	extra := c.opts.GatewayArgs
	if g := c.opts.GatewayCountCustomResourceGroups; len(g) > 0 {
		extra = append(slices.Clip(extra), "--count-custom-resource-groups="+strings.Join(g, ","))
	}
	err := c.run(GatewayName, c.opts.Rampart, append([]string{"gateway",
		"--kubeconfig=" + c.path(gatewayID.file),
		"--listen=127.0.0.1:" + strconv.Itoa(c.ports.gateway),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.ports.gatewayMetrics),
		"--tls-cert-file=" + c.pkiFile("gateway.crt"), "--tls-private-key-file=" + c.pkiFile("gateway.key"),
		"--client-ca-file=" + c.pkiFile("ca.crt"),
		"--health-interval=1s",
		"--traffic-log=" + c.GatewayTrafficLog(), "--traffic-log-max-size=50", "--traffic-log-max-backups=2",
		"--name=" + GatewayName,
		"--namespace=" + ManagerNamespace, "--etcd-space-brake-exempt-users=" + ManagerUser,
	}, append(c.gatewayUpstreamArgs(), extra...)...)...)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, GatewayName, "http://127.0.0.1:"+strconv.Itoa(c.ports.gatewayMetrics)+"/readyz", nil)
}

// forgetStopped drops the record of a stopped component about to start
// again, so that its exit is not taken for the new process's.
func (c *Cluster) forgetStopped(name string) {
	c.procs = slices.DeleteFunc(c.procs, func(p *Process) bool { return p.Name == name && !p.alive() })
}

// KillComponent kills a component at once (SIGKILL), as a crash would:
// no graceful shutdown, open connections reset.
func (c *Cluster) KillComponent(name string) error {
	for _, p := range c.procs {
		if p.Name == name && p.alive() {
			if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !waitGone(ctx, p) {
				return fmt.Errorf("%s (pid %d) did not die", p.Name, p.PID)
			}
			return nil
		}
	}
	return fmt.Errorf("no running component %q", name)
}

// APIServerName is the process name of API server i (0 is the first).
func APIServerName(i int) string {
	if i == 0 {
		return "kube-apiserver"
	}
	return "kube-apiserver-" + strconv.Itoa(i)
}

// StartAPIServer starts API server i (0 is the first) again after
// StopComponent(APIServerName(i)), on the same port, and waits until it is
// ready.
func (c *Cluster) StartAPIServer(ctx context.Context, i int) error {
	if i == 0 {
		c.forgetStopped(APIServerName(0))
		return c.startAPIServerOn(ctx, APIServerName(0), c.ports.apiserver, "audit.log")
	}
	if i < 1 || i > len(c.ports.moreAPIServers) {
		return fmt.Errorf("no API server %d to restart: the cluster has %d", i, len(c.ports.moreAPIServers)+1)
	}
	c.forgetStopped(APIServerName(i))
	return c.startAPIServerOn(ctx, APIServerName(i), c.ports.moreAPIServers[i-1], "audit-"+strconv.Itoa(i)+".log")
}

// PKIFile is a file of the cluster's PKI, e.g. "ca.crt" (for tests that
// issue their own client certificates).
func (c *Cluster) PKIFile(name string) string { return filepath.Join(c.Dir, "pki", name) }

// PID is the process id of the running component name (e.g.
// APIServerName(0)), or 0 if none runs.
func (c *Cluster) PID(name string) int {
	for _, p := range c.procs {
		if p.Name == name && p.alive() {
			return p.PID
		}
	}
	return 0
}
