package backup

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// Snapshotter takes one verified etcd snapshot with the credentials of a
// Secret and stores it under name.
type Snapshotter interface {
	Snapshot(ctx context.Context, secretName, name string) (snapshot.Info, error)
}

// SecretSnapshotter reads the etcd endpoints and client certificate from
// a Secret in Namespace at each run (a rotated certificate is used at
// once, no restart), then saves as `rampart etcd snapshot save` does.
type SecretSnapshotter struct {
	// Reader gets the one Secret, uncached: the manager may get the
	// Secrets it is allowed by name only, never list or watch them.
	Reader    client.Reader
	Namespace string
	Store     storage.Store
	// TmpDir is where a snapshot is verified before it is stored.
	TmpDir string
}

// The keys of an etcd Secret.
const (
	SecretEndpoints = "endpoints"
	SecretCA        = "ca.crt"
	SecretCert      = "tls.crt"
	SecretKey       = "tls.key"
)

func (s *SecretSnapshotter) Snapshot(ctx context.Context, secretName, name string) (snapshot.Info, error) {
	c, err := EtcdClientFromSecret(ctx, s.Reader, s.Namespace, secretName)
	if err != nil {
		return snapshot.Info{}, err
	}
	cli, err := pickMember(ctx, c, c.Endpoints)
	if err != nil {
		return snapshot.Info{}, fmt.Errorf("with the etcd Secret %s/%s: %w", s.Namespace, secretName, err)
	}
	defer cli.Close()
	return snapshot.Save(ctx, cli, s.Store, name, s.TmpDir)
}

// EtcdClientFromSecret reads etcd's endpoints and a client certificate
// from the Secret namespace/name (keys endpoints, ca.crt, tls.crt,
// tls.key), by name, uncached: read at each use, a rotated certificate
// is used at once.
func EtcdClientFromSecret(ctx context.Context, reader client.Reader, namespace, name string) (source.Client, error) {
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec); err != nil {
		return source.Client{}, fmt.Errorf("read the etcd Secret %s/%s: %w", namespace, name, err)
	}
	var missing []string
	for _, k := range []string{SecretEndpoints, SecretCA, SecretCert, SecretKey} {
		if len(sec.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return source.Client{}, fmt.Errorf("the etcd Secret %s/%s lacks %s: it needs endpoints (https://HOST:2379,...), ca.crt, tls.crt and tls.key",
			namespace, name, strings.Join(missing, ", "))
	}
	c := source.Client{CAData: sec.Data[SecretCA], CertData: sec.Data[SecretCert], KeyData: sec.Data[SecretKey]}
	for _, e := range strings.Split(string(sec.Data[SecretEndpoints]), ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.Endpoints = append(c.Endpoints, e)
		}
	}
	return c, nil
}

// pickMember connects to one member, as etcdctl snapshot save wants (a
// snapshot is one member's database): the leader when it answers, else
// the first member that does, so that one member down does not stop the
// snapshots, and a follower's is taken only when the leader cannot give
// one.
func pickMember(ctx context.Context, c source.Client, endpoints []string) (*clientv3.Client, error) {
	var fallback *clientv3.Client
	var errs []string
	for _, ep := range endpoints {
		c.Endpoints = []string{ep}
		cli, err := c.Dial(ctx)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		st, err := cli.Status(ctx, ep)
		if err == nil && st.Header.MemberId == st.Leader {
			if fallback != nil {
				_ = fallback.Close()
			}
			return cli, nil
		}
		if fallback == nil && err == nil {
			fallback = cli
		} else {
			_ = cli.Close()
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no endpoint: the Secret's endpoints key names none")
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

// etcdSnapshotName is where run now of Backup name puts its snapshot.
func etcdSnapshotName(backup string, now time.Time) string {
	return "etcd/" + backup + "-" + now.UTC().Format(runTimeLayout) + ".db"
}

const runTimeLayout = "20060102-150405"

// etcdSnapshots lists Backup name's snapshots in store, oldest first,
// with the times their names hold; a name of another Backup (say
// NAME-b-...) does not match.
func etcdSnapshots(ctx context.Context, store storage.Store, backup string) ([]string, []time.Time, error) {
	objs, err := store.List(ctx, "etcd/"+backup+"-")
	if err != nil {
		return nil, nil, err
	}
	re := regexp.MustCompile(`^etcd/` + regexp.QuoteMeta(backup) + `-([0-9]{8}-[0-9]{6})\.db$`)
	var names []string
	var started []time.Time
	for _, o := range objs {
		m := re.FindStringSubmatch(o.Name)
		if m == nil {
			continue
		}
		t, err := time.Parse(runTimeLayout, m[1])
		if err != nil {
			continue
		}
		names = append(names, o.Name)
		started = append(started, t)
	}
	// By time, which the names' order already is; sorted anyway so the
	// store's listing order does not matter.
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return started[a].Compare(started[b]) })
	sn, st := make([]string, len(idx)), make([]time.Time, len(idx))
	for i, j := range idx {
		sn[i], st[i] = names[j], started[j]
	}
	return sn, st, nil
}
