package localcluster

import "strconv"

// EtcdURL is etcd's client address. It serves TLS and wants a client
// certificate: PKIFile("etcd-ca.crt"), PKIFile("etcd-client.crt") and
// PKIFile("etcd-client.key"), the ones the API server uses.
func (c *Cluster) EtcdURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.etcdClient)
}
