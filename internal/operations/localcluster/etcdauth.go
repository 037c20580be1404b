package localcluster

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
)

// etcd's door (docs/etcd.md, "Only the API server writes etcd"). With
// etcd's authentication on, etcd takes a client certificate's common name
// as its user, and a user may do only what its roles grant:
//
//   - the API server (EtcdAPIServerUser) reads and writes /registry/ and
//     nothing else;
//   - Rampart's space guard (EtcdReaderUser) reads every key under "/";
//   - any other certificate etcd's CA signed (an operator's etcdctl, the
//     one EtcdOperatorUser stands for) may do nothing;
//   - root (EtcdRootUser) may do everything, and only root may take a
//     snapshot, compact, defragment or disarm an alarm: etcd checks
//     IsAdminPermitted for each (v3.6: api/v3rpc/maintenance.go, key.go
//     Compact). Backups of etcd and `rampart etcd space recover` need it.
//
// What the API server needs beyond its prefix, checked in
// k8s.io/apiserver v0.37 and on this cluster: its health check reads
// /registry/health (inside the prefix), its size metric asks Status and
// its events' leases are granted and revoked (any user; a revoke needs
// write on the lease's keys, all under /registry/) — but its compactor
// calls Compact, which only root may. So the API server's compaction is
// off (--etcd-compaction-interval=0) and etcd compacts itself every five
// minutes (--auto-compaction-mode=periodic, retention 5m), what the API
// server's compactor does by default.
const (
	EtcdRootUser      = "root"
	EtcdAPIServerUser = "kube-apiserver-etcd-client"
	EtcdReaderUser    = "rampart-etcd-reader"
	EtcdOperatorUser  = "etcd-operator"
)

// etcdCerts are the PKI files (without .crt/.key) of each etcd user.
var etcdCerts = map[string]string{
	EtcdRootUser: "etcd-root", EtcdAPIServerUser: "etcd-client",
	EtcdReaderUser: "etcd-reader", EtcdOperatorUser: "etcd-operator",
}

// EtcdClient is how to reach this cluster's etcd as user (one of the
// Etcd*User names): the endpoint, etcd's CA and that user's certificate.
func (c *Cluster) EtcdClient(user string) source.Client {
	base := etcdCerts[user]
	return source.Client{Endpoints: []string{c.EtcdURL()}, CACert: c.pkiFile("etcd-ca.crt"),
		Cert: c.pkiFile(base + ".crt"), Key: c.pkiFile(base + ".key")}
}

// etcdRegistry is the API server's key prefix (--etcd-prefix, default).
const etcdRegistry = "/registry/"

// etcdAuth is whether this cluster's etcd runs with authentication on: a
// protected cluster does unless Options.NoEtcdAuth.
func (c *Cluster) etcdAuth() bool { return !c.opts.Unprotected && !c.opts.NoEtcdAuth }

// enableEtcdAuth adds the users and roles above and turns authentication
// on, as root; an etcd that has it on already (a restart) is left alone.
func (c *Cluster) enableEtcdAuth(ctx context.Context) error {
	cli, err := c.EtcdClient(EtcdRootUser).Dial(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd's auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	noPassword := &clientv3.UserAddOptions{NoPassword: true}
	steps := []struct {
		what string
		do   func() error
	}{
		{"root", func() error { _, err := cli.UserAddWithOptions(ctx, EtcdRootUser, "", noPassword); return err }},
		{"root's role", func() error { _, err := cli.UserGrantRole(ctx, EtcdRootUser, "root"); return err }},
		{"the API server", func() error {
			return grant(ctx, cli, EtcdAPIServerUser, "kube-apiserver", clientv3.PermissionType(clientv3.PermReadWrite), etcdRegistry)
		}},
		// The space guard walks every key under "/", not only the API
		// server's: a writer that fills etcd may be another user of it.
		{"Rampart's reader", func() error {
			return grant(ctx, cli, EtcdReaderUser, "rampart-etcd-reader", clientv3.PermissionType(clientv3.PermRead), "/")
		}},
		{"on", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("turning etcd's authentication on (%s): %w", s.what, err)
		}
	}
	return nil
}

// grant makes user, with role, allowed perm on the keys under prefix.
func grant(ctx context.Context, cli *clientv3.Client, user, role string, perm clientv3.PermissionType, prefix string) error {
	if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		return err
	}
	if _, err := cli.RoleAdd(ctx, role); err != nil {
		return err
	}
	if _, err := cli.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), perm); err != nil {
		return err
	}
	_, err := cli.UserGrantRole(ctx, user, role)
	return err
}

// apiserverCompaction is the API server's --etcd-compaction-interval: off
// when etcd's authentication is (its compactor needs root), its default
// otherwise.
func (c *Cluster) apiserverCompaction() string {
	if c.etcdAuth() {
		return "--etcd-compaction-interval=0"
	}
	return "--etcd-compaction-interval=5m"
}
