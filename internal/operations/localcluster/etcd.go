package localcluster

import (
	"context"
	"strconv"
)

// EtcdURL is etcd's client address. It serves TLS and wants a client
// certificate: PKIFile("etcd-ca.crt"), PKIFile("etcd-client.crt") and
// PKIFile("etcd-client.key"), the ones the API server uses.
func (c *Cluster) EtcdURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.etcdClient)
}

// EtcdMember is what a restore into a new data directory needs to name
// the local etcd member: its name and peer URL.
func (c *Cluster) EtcdMember() (name, peerURL string) {
	return "rampart-local", "https://127.0.0.1:" + strconv.Itoa(c.ports.etcdPeer)
}

// EtcdDataDir is etcd's data directory; with etcd stopped, a restore may
// replace it.
func (c *Cluster) EtcdDataDir() string { return c.path("etcd") }

// StartEtcd starts etcd again after StopComponent("etcd"), on the same
// ports and data directory, and waits until it is healthy.
func (c *Cluster) StartEtcd(ctx context.Context) error {
	c.forgetStopped("etcd")
	return c.startEtcd(ctx)
}

// RestartControllers stops and starts again every client of the API
// server that keeps a cache: kube-controller-manager, kube-scheduler,
// kwok and the Rampart managers, each waited for until healthy. After an
// etcd restore (docs/etcd.md, "Restoring an etcd snapshot without the kubelet
// trap", step 4) none may keep acting on what it cached before.
func (c *Cluster) RestartControllers(ctx context.Context) error {
	restarts := []struct {
		name  string
		start func(context.Context) error
	}{
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"kwok", c.startKwok},
	}
	for _, r := range restarts {
		if err := c.StopComponent(r.name); err != nil {
			return err
		}
		c.forgetStopped(r.name)
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	if c.opts.Unprotected {
		return nil
	}
	return c.RestartManagers(ctx)
}

// SetEtcdQuota restarts etcd on the same data with
// --quota-backend-bytes=quota (0: DefaultEtcdQuotaBytes), and waits until
// it is healthy: a drill brings a running cluster's etcd near its quota
// without starting a cluster of its own. etcd is killed, not stopped: it
// is crash-safe, and its graceful stop waits about 7 s here for the API
// server's watch streams to end.
func (c *Cluster) SetEtcdQuota(ctx context.Context, quota int64) error {
	if err := c.KillComponent("etcd"); err != nil {
		return err
	}
	c.opts.EtcdQuotaBytes = quota
	return c.StartEtcd(ctx)
}
