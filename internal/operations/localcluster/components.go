package localcluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// serviceCIDR is the local cluster's service range; its first address is
	// the kubernetes Service, in the API server's certificate.
	serviceCIDR = "10.0.0.0/24"
	// podCIDR is where kwok hands out pod IPs: room for 65k pods.
	podCIDR = "10.128.0.0/16"
	// startTimeout bounds each component's start-up.
	startTimeout = 90 * time.Second
)

func (c *Cluster) asset(name string) string { return filepath.Join(c.opts.Assets, name) }

func (c *Cluster) pkiFile(name string) string { return c.path("pki", name) }

func (c *Cluster) startEtcd(ctx context.Context) error {
	client := c.EtcdURL()
	name, peer := c.EtcdMember()
	args := []string{
		"--name=" + name,
		"--data-dir=" + c.EtcdDataDir(),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=rampart-local=" + peer,
		"--cert-file=" + c.pkiFile("etcd-server.crt"), "--key-file=" + c.pkiFile("etcd-server.key"),
		"--client-cert-auth", "--trusted-ca-file=" + c.pkiFile("etcd-ca.crt"),
		"--peer-cert-file=" + c.pkiFile("etcd-server.crt"), "--peer-key-file=" + c.pkiFile("etcd-server.key"),
		"--peer-client-cert-auth", "--peer-trusted-ca-file=" + c.pkiFile("etcd-ca.crt"),
		// Drills write thousands of objects; the default 2 GiB quota and
		// per-write fsync are production settings, not a laptop's.
		"--quota-backend-bytes=" + strconv.FormatInt(cmp.Or(c.opts.EtcdQuotaBytes, DefaultEtcdQuotaBytes), 10), "--unsafe-no-fsync",
		"--log-level=warn",
	}
	if c.etcdAuth() {
		// The API server's compactor needs root (etcdauth.go): etcd
		// compacts itself as often, keeping five minutes of history.
		args = append(args, "--auto-compaction-mode=periodic", "--auto-compaction-retention=5m")
	}
	if err := c.run("etcd", c.asset("etcd"), args...); err != nil {
		return err
	}
	tlsCfg, err := c.tlsConfig("etcd-ca.crt", "etcd-client")
	if err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, "etcd", client+"/health", tlsCfg); err != nil {
		return err
	}
	if !c.etcdAuth() {
		return nil
	}
	return c.enableEtcdAuth(ctx)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if err := c.startAPIServerOn(ctx, "kube-apiserver", c.ports.apiserver, "audit.log"); err != nil {
		return err
	}
	return c.startMoreAPIServers(ctx)
}

func (c *Cluster) startAPIServerOn(ctx context.Context, name string, port int, auditLog string) error {
	policy := c.path("audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return err
	}
	err := c.run(name, c.asset("kube-apiserver"),
		"--etcd-servers=https://127.0.0.1:"+strconv.Itoa(c.ports.etcdClient),
		"--etcd-cafile="+c.pkiFile("etcd-ca.crt"),
		"--etcd-certfile="+c.pkiFile("etcd-client.crt"), "--etcd-keyfile="+c.pkiFile("etcd-client.key"),
		c.apiserverCompaction(),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+c.pkiFile("apiserver.crt"), "--tls-private-key-file="+c.pkiFile("apiserver.key"),
		"--client-ca-file="+c.pkiFile("ca.crt"),
		"--kubelet-client-certificate="+c.pkiFile("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+c.pkiFile("apiserver-kubelet-client.key"),
		// A real node's name does not resolve; its address does.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--authorization-mode=Node,RBAC",
		// The gateway forwards identities by constrained impersonation:
		// beta and on by default from Kubernetes 1.36, alpha in 1.35 (make
		// compat runs 1.35), where it must be turned on.
		"--feature-gates=ConstrainedImpersonation=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pkiFile("sa.key"),
		"--service-account-signing-key-file="+c.pkiFile("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--allow-privileged=true",
		"--audit-policy-file="+policy,
		"--audit-log-path="+c.path(auditLog),
		"--audit-log-maxsize=200", "--audit-log-maxbackup=3",
		// Webhooks and aggregated APIs referenced by Service are reached at
		// their endpoints: there is no kube-proxy on this machine.
		"--enable-aggregator-routing=true",
		// A loopback advertise address cannot be an Endpoints address.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		// Presents a client certificate to webhooks, which accept no other
		// caller (webhookauth.go).
		"--admission-control-config-file="+c.path(admissionConfig),
	)
	if err != nil {
		return err
	}
	tlsCfg, err := c.tlsConfig("ca.crt", "")
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, name, "https://127.0.0.1:"+strconv.Itoa(port)+"/readyz", tlsCfg, adminCert(c))
}

// auditPolicy records every request's metadata except the lease heartbeats
// of nodes and controllers, which would drown the rest, and the bodies of
// the status writes of budgets and flow controls: what the ledger wrote,
// write by write, to tell how a count went wrong.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: Request
  verbs: ["update", "patch"]
  resources:
  - group: rampart.io
    resources: ["podunavailablebudgets/status", "deletionflowcontrols/status"]
- level: Metadata
`

func (c *Cluster) startControllerManager(ctx context.Context) error {
	kc := c.path(kcmID.file)
	err := c.run("kube-controller-manager", c.asset("kube-controller-manager"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.kcm),
		"--cert-dir="+c.path("kcm"),
		// Every controller, garbage collector and namespace controller
		// included, each with its own service account.
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.pkiFile("sa.key"),
		"--root-ca-file="+c.pkiFile("ca.crt"),
		"--cluster-signing-cert-file="+c.pkiFile("ca.crt"), "--cluster-signing-key-file="+c.pkiFile("ca.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--leader-elect=false",
		"--kube-api-qps=200", "--kube-api-burst=400",
	)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, "kube-controller-manager", "https://127.0.0.1:"+strconv.Itoa(c.ports.kcm)+"/healthz", selfSigned())
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc := c.path(schedulerID.file)
	err := c.run("kube-scheduler", c.asset("kube-scheduler"),
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.scheduler),
		"--cert-dir="+c.path("scheduler"),
		"--leader-elect=false",
		"--kube-api-qps=200", "--kube-api-burst=400",
	)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, "kube-scheduler", "https://127.0.0.1:"+strconv.Itoa(c.ports.scheduler)+"/healthz", selfSigned())
}

// PodReadyDelayAnnotation on a pod makes the simulated kubelet wait that
// long (a Go duration, e.g. "3s") before the pod runs and is Ready: an
// application's start-up time, for drills where replacements are not
// instant.
const PodReadyDelayAnnotation = "pod-ready.stage.kwok.x-k8s.io/delay"

// kwokStagesFile is where, in the cluster's directory, kwok's stages are
// written. kwok is given this relative name (it runs in the cluster's
// directory, see spawn): it splits --config at commas, so an absolute path
// through a directory with a comma in its name would make it exit.
const kwokStagesFile = "kwok-stages.yaml"

// PodCompleteDelayAnnotation on a Job's pod delays kwok's completing it
// (a duration such as "1h"), so that a Job's pods run as a training job's
// workers do; without it they complete at once.
const PodCompleteDelayAnnotation = "pod-complete.stage.kwok.x-k8s.io/delay"

// writeKwokStages writes kwok's own fast stages with two additions: the
// pod-ready stage waits for PodReadyDelayAnnotation and the pod-complete
// stage for PodCompleteDelayAnnotation (none without them).
func (c *Cluster) writeKwokStages() error {
	raw, err := os.ReadFile(c.asset("kwok-stages.yaml"))
	if err != nil {
		return err
	}
	stages := string(raw)
	for stage, annotation := range map[string]string{"pod-ready": PodReadyDelayAnnotation, "pod-complete": PodCompleteDelayAnnotation} {
		anchor := "  name: " + stage + "\nspec:\n"
		delay := "  delay:\n    durationMilliseconds: 0\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"" + annotation + "\"]'\n"
		if !strings.Contains(stages, anchor) {
			return fmt.Errorf("%s: no %s stage to add a delay to", c.asset("kwok-stages.yaml"), stage)
		}
		stages = strings.Replace(stages, anchor, anchor+delay, 1)
	}
	return os.WriteFile(c.path(kwokStagesFile), []byte(stages), 0o644)
}

func (c *Cluster) startKwok(ctx context.Context) error {
	if err := c.writeKwokStages(); err != nil {
		return err
	}
	err := c.run("kwok", c.asset("kwok"),
		"--kubeconfig="+c.path(kwokID.file),
		"--config="+kwokStagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		"--disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom",
		"--cidr="+podCIDR, "--node-ip=10.255.0.1",
		// Renew node leases: without them the node controller marks nodes
		// and their pods NotReady after its grace period, and kwok does not
		// make those pods Ready again.
		"--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:"+strconv.Itoa(c.ports.kwok),
	)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, "kwok", "http://127.0.0.1:"+strconv.Itoa(c.ports.kwok)+"/healthz", nil)
}

// tlsConfig trusts the named CA and, if client is set, presents that pair.
func (c *Cluster) tlsConfig(caFile, client string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(c.pkiFile(caFile))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != "" {
		pair, err := tls.LoadX509KeyPair(c.pkiFile(client+".crt"), c.pkiFile(client+".key"))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func adminCert(c *Cluster) func(*tls.Config) error {
	return func(cfg *tls.Config) error {
		pair, err := tls.X509KeyPair(c.Config.CertData, c.Config.KeyData)
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{pair}
		return nil
	}
}

// selfSigned is for the health endpoints of controller-manager and
// scheduler, which serve a certificate they made themselves on loopback.
func selfSigned() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback health probe of a child process
}

// waitHealthy polls url until it answers 200, the component exits, or the
// start-up timeout passes.
func (c *Cluster) waitHealthy(ctx context.Context, name, url string, tlsCfg *tls.Config, mods ...func(*tls.Config) error) error {
	if tlsCfg != nil {
		for _, m := range mods {
			if err := m(tlsCfg); err != nil {
				return err
			}
		}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		if err := c.exitedEarly(name); err != nil {
			return false, err
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && c.exitedEarly(name) == nil {
		return fmt.Errorf("%s not healthy at %s (last: %s); see %s: %w", name, url, last, c.path("logs", name+".log"), err)
	}
	return err
}
