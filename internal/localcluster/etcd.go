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
