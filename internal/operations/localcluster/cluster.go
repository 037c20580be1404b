// Package localcluster runs a real Kubernetes control plane on this machine:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok's
// simulated nodes, all built from their Go modules into bin/k8s by
// `make assets`, plus Rampart's manager. `rampart up`, `rampart down`, the
// integration tests and the drills all start clusters through this package.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rampart-io/rampart/internal/plumbing/loopback"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// Options say what cluster to start.
type Options struct {
	// Dir holds the cluster's state: PKI, kubeconfigs, etcd data, logs.
	Dir string
	// Assets is the directory with the Kubernetes binaries (bin/k8s).
	Assets string
	// Rampart is the rampart binary that runs the manager.
	Rampart string
	// Nodes is the number of simulated nodes.
	Nodes int
	// Unprotected starts no Rampart manager: a plain cluster.
	Unprotected bool
	// Detached leaves the processes running after this process exits;
	// otherwise they die with it.
	Detached bool
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// ManagerArgs are extra flags for `rampart manager`.
	ManagerArgs []string
	// RecycleBinStore, when set, is where the managers keep the recycle
	// bin (--recycle-bin-store: a directory or s3://BUCKET/PREFIX?...)
	// instead of the cluster's recycle-bin directory.
	RecycleBinStore string
	// BackupStore, when set, has the managers run Backup objects into it
	// (--backup-store), with the rights to read every resource (the
	// chart's manager.backup).
	BackupStore string
	// NoRecycleBin starts the managers without the recycle bin (it is on
	// by default): protected deletes are judged and nothing is kept.
	NoRecycleBin bool
	// Managers is the number of manager replicas (default 1). With more,
	// each webhook is registered once per replica and the API server
	// spreads requests over them by request UID.
	Managers int
	// APIServers is the number of kube-apiservers on the one etcd
	// (default 1).
	APIServers int
	// Gateway starts `rampart gateway` in front of the API servers and
	// writes DIR/kubeconfig-gateway; DIR/kubeconfig stays direct.
	Gateway bool
	// ComponentsViaGateway points kube-controller-manager, kube-scheduler
	// and kwok at the gateway instead of the first API server.
	ComponentsViaGateway bool
	// CustomResourceGroups are the API groups of custom resources the
	// manager may list and watch, as the chart's
	// manager.customResourceGroups.
	CustomResourceGroups []string
	// RealNodes is the number of real kubelet nodes (containerd, runc,
	// `rampart node-guard`) started besides the simulated ones; see
	// realnodes.go for what this machine needs.
	RealNodes int
	// GatewayCountCustomResourceGroups are the API groups of custom
	// resources the gateway's LIST guard may count per namespace, as the
	// chart's gateway.countCustomResourceGroups.
	GatewayCountCustomResourceGroups []string
	// GatewayArgs are extra flags for `rampart gateway`.
	GatewayArgs []string
	// GatewayPools give the last API servers to named pools of the
	// gateway (--upstream-pool), the rest staying in its default pool.
	GatewayPools []GatewayPool
	// EtcdSpace has the managers watch etcd's space
	// (--etcd-space-secret EtcdSpaceSecret, as the chart's
	// manager.etcdSpace.secretName): the rampart_etcd_* gauges and the
	// ConfigMap rampart-etcd-space that rampart status shows.
	EtcdSpace bool
	// EtcdQuotaBytes is etcd's --quota-backend-bytes (default
	// DefaultEtcdQuotaBytes): a small one lets a test or drill fill etcd
	// to its NOSPACE alarm in seconds.
	EtcdQuotaBytes int64
	// NoEtcdAuth leaves etcd's authentication off on a protected cluster
	// (an unprotected one never has it): any certificate etcd's CA signed
	// may then write every key, as on most clusters (etcdauth.go).
	NoEtcdAuth bool
}

// DefaultEtcdQuotaBytes is the local etcd's quota: 8 GiB, because drills
// write thousands of objects; etcd's own default is 2 GiB.
const DefaultEtcdQuotaBytes int64 = 8 << 30

// Cluster is a running local cluster.
type Cluster struct {
	Dir string
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// Config is the admin client configuration.
	Config *rest.Config

	opts  Options
	ports ports
	// mu guards procs while Start runs its lanes side by side, and the
	// progress lines they print.
	mu      sync.Mutex
	procs   []*Process
	scraper metricsScraperToken
	// realNodes are the real kubelet nodes started so far.
	realNodes []*realNode
	// pools are the gateway's named pools now.
	pools []GatewayPool
}

// Binaries the cluster needs from Options.Assets.
var requiredAssets = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "kwok-stages.yaml"}

// CheckAssets says, in one line, which binaries are missing.
func CheckAssets(assets string) error {
	for _, name := range requiredAssets {
		if _, err := os.Stat(filepath.Join(assets, name)); err != nil {
			return fmt.Errorf("%s is missing: run `make assets` to build the local control plane", filepath.Join(assets, name))
		}
	}
	return nil
}

type ports struct {
	etcdClient, etcdPeer, apiserver, kcm, scheduler, kwok int
	// managers are the ports of each manager replica.
	managers []managerPorts
	// moreAPIServers are the ports of API servers after the first.
	moreAPIServers []int
	// gateway and gatewayMetrics are 0 without a gateway.
	gateway, gatewayMetrics int
}

type managerPorts struct{ webhook, metrics, health int }

// freePorts: loopback ports for the cluster's components, which bind them
// later; see package loopback for why not the kernel's :0.
func freePorts(n int) ([]int, error) { return loopback.FreePorts(n) }

func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// APIServerURL is the API server's address.
func (c *Cluster) APIServerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.apiserver)
}

func (c *Cluster) progress(format string, args ...any) {
	if c.opts.Progress != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		fmt.Fprintf(c.opts.Progress, format+"\n", args...)
	}
}

// Start starts a cluster in opts.Dir and returns once every component is
// ready: the API server answers /readyz, the nodes are Ready, the default
// service account exists, and (unless unprotected) the API server calls
// Rampart's webhook and honours its answer. On error, whatever started is
// stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := CheckAssets(opts.Assets); err != nil {
		return nil, err
	}
	for _, g := range opts.CustomResourceGroups {
		// The core group, or a wildcard, would let the manager read Secrets.
		if !strings.Contains(g, ".") || strings.Contains(g, "*") {
			return nil, fmt.Errorf("custom resource group %q: want a custom resource's API group such as cert-manager.io", g)
		}
	}
	if err := gateway.CheckCountGroups(opts.GatewayCountCustomResourceGroups); err != nil {
		return nil, err
	}
	if err := checkGatewayPools(opts.GatewayPools, opts.APIServers); err != nil {
		return nil, err
	}
	if len(opts.GatewayPools) > 0 && !opts.Gateway {
		return nil, errors.New("--gateway-pool needs --gateway")
	}
	if !opts.Unprotected || opts.Gateway {
		if _, err := os.Stat(opts.Rampart); err != nil {
			return nil, fmt.Errorf("rampart binary %s is missing: run `make build`", opts.Rampart)
		}
	}
	if opts.Nodes < 0 {
		return nil, errors.New("--nodes must be 0 or more")
	}
	if opts.RealNodes < 0 {
		return nil, errors.New("--real-nodes must be 0 or more")
	}
	if opts.EtcdQuotaBytes < 0 {
		return nil, errors.New("the etcd quota must be 0 (the default, 8 GiB) or more bytes")
	}
	if opts.RealNodes > 0 {
		if err := CheckRealNodePrerequisites(opts.Assets); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if running, _ := Running(dir); len(running) > 0 {
		return nil, fmt.Errorf("a cluster already runs in %s (%v): run `rampart down --dir %s` first", dir, running, dir)
	}
	// A fresh start: state of a previous cluster in dir would not match the
	// new PKI. A real node's directory may hold mounts a crash left.
	for _, n := range realNodeDirs(dir) {
		if err := teardownRealNode(n); err != nil {
			return nil, fmt.Errorf("cleaning the real node of a previous cluster: %w", err)
		}
	}
	for _, sub := range []string{"real-nodes", "pki", "kubeconfigs", "etcd", "manager", "kcm", "scheduler", gatewayKubeconfig} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return nil, err
	}
	managers := max(opts.Managers, 1)
	extra := max(opts.APIServers, 1) - 1 + 2
	p, err := freePorts(6 + 3*managers + extra)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Dir:        dir,
		Kubeconfig: filepath.Join(dir, adminID.file),
		opts:       opts,
		pools:      opts.GatewayPools,
		ports: ports{etcdClient: p[0], etcdPeer: p[1], apiserver: p[2], kcm: p[3], scheduler: p[4],
			kwok: p[5]},
	}
	for i := range managers {
		c.ports.managers = append(c.ports.managers, managerPorts{webhook: p[6+3*i], metrics: p[7+3*i], health: p[8+3*i]})
	}
	c.assignGatewayPorts(p[6+3*managers:])
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if err := c.makePKI(time.Now()); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if err := c.runSteps(ctx, c.controlPlaneSteps()); err != nil {
		return nil, err
	}
	// The API server's other clients and Rampart need only the API server:
	// side by side, start-up takes the longer of the two lanes, not their
	// sum (the second is about 3 s of a warm make up's 8-11 s).
	lanes, ctx := errgroup.WithContext(ctx)
	lanes.Go(func() error { return c.runSteps(ctx, c.nodeSteps()) })
	lanes.Go(func() error { return c.runSteps(ctx, c.rampartSteps()) })
	if err := lanes.Wait(); err != nil {
		return nil, err
	}
	return c, nil
}

type step struct {
	name string
	run  func(context.Context) error
}

// runSteps runs steps in order, printing how long each took.
func (c *Cluster) runSteps(ctx context.Context, steps []step) error {
	for _, step := range steps {
		start := time.Now()
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		c.progress("  %-40s %5.1fs", step.name, time.Since(start).Seconds())
	}
	return nil
}

func (c *Cluster) controlPlaneSteps() []step {
	return append([]step{
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
	}, c.gatewaySteps()...)
}

// nodeSteps start the API server's other clients and the nodes.
func (c *Cluster) nodeSteps() []step {
	s := []step{
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"kwok", c.startKwok},
		{fmt.Sprintf("%d simulated nodes Ready", c.opts.Nodes), func(ctx context.Context) error { return c.AddNodes(ctx, c.opts.Nodes) }},
		{"default service account", c.waitDefaultServiceAccount},
	}
	if c.opts.RealNodes > 0 {
		s = append(s, step{fmt.Sprintf("%d real nodes Ready", c.opts.RealNodes), func(ctx context.Context) error { return c.AddRealNodes(ctx, c.opts.RealNodes) }})
	}
	return s
}

// rampartSteps install and start Rampart, unless unprotected.
func (c *Cluster) rampartSteps() []step {
	if c.opts.Unprotected {
		return nil
	}
	return []step{
		{"rampart CRDs and RBAC", c.installRampart},
		{"rampart manager", c.startManager},
		{"webhook answers the API server", c.waitWebhookEnforced},
	}
}

// Stop stops every process of the cluster and removes its record. Data and
// logs stay in Dir for a post-mortem.
func (c *Cluster) Stop() error {
	err := stopCluster(c.Dir, c.procs)
	c.procs = nil
	if rmErr := os.Remove(c.path(stateFile)); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}

// Wait blocks until ctx ends or a component exits; it names the component.
func (c *Cluster) Wait(ctx context.Context) error {
	cases := make(chan *Process, len(c.procs))
	for _, p := range c.procs {
		go func() {
			select {
			case <-p.exited:
				cases <- p
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case p := <-cases:
		return fmt.Errorf("%s exited; see %s", p.Name, c.path("logs", p.Name+".log"))
	}
}

// Exited names the components whose process has ended, stopped or
// crashed: a test that stops or restarts components (a drill) checks with
// it that it left the cluster running.
func (c *Cluster) Exited() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.procs {
		if !p.alive() {
			out = append(out, p.Name)
		}
	}
	return out
}

// StopComponent stops one component, e.g. "rampart-manager", to show what
// its outage does; the rest keeps running.
func (c *Cluster) StopComponent(name string) error {
	for _, p := range c.procs {
		if p.Name == name {
			return p.stop(15 * time.Second)
		}
	}
	return fmt.Errorf("no component %q", name)
}

// Clientset is a typed admin client.
func (c *Cluster) Clientset() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(c.Config)
}

// KubectlPath is the kubectl built with the cluster's binaries.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.opts.Assets, "kubectl") }

func (c *Cluster) run(name, binary string, args ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := spawn(c.Dir, c.opts.Detached, name, binary, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return writeState(c.Dir, c.procs)
}

// exitedEarly turns a component's early exit into an error naming its log.
func (c *Cluster) exitedEarly(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.Name == name && !p.alive() {
			return fmt.Errorf("%s exited during start-up; see %s", name, c.path("logs", name+".log"))
		}
	}
	return nil
}
