package etcdtool_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestRestoreWithoutTheKubeletTrap follows the restore steps of docs/etcd.md on a
// cluster of its own: a snapshot saved by `rampart etcd snapshot save` is
// restored with etcdutl, raising the revision and marking it compacted.
// What a user sees: the object made after the snapshot is gone, the one
// before is back, and every watcher that resumes from a revision it saw
// before the restore is told to relist (410 from the API server,
// "compacted" from etcd) instead of trusting its cache, which is what
// makes kubelets and controllers act on stale state; new writes get
// revisions no client has seen.
func TestRestoreWithoutTheKubeletTrap(t *testing.T) {
	etcdutlPath(t)
	env := clustertest.Start(t, localcluster.Options{Unprotected: true})
	ctx := context.Background()
	ns := "restore"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"v": name}}
	}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, ok := rampart(t, append([]string{"etcd", "snapshot", "save", "--dir=" + dir, "--name=s.db"}, etcdFlags(env)...)...); !ok {
		t.Fatalf("snapshot save:\n%s", out)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm("after"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seenRev, err := strconv.ParseInt(seen.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	const bump = 1_000_000_000
	restoreEtcd(t, env, filepath.Join(dir, "s.db"), "--bump-revision", strconv.Itoa(bump), "--mark-compacted")

	if _, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("the object saved in the snapshot is not back: %v", err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the object made after the snapshot is still there: %v", err)
	}
	// A watcher resuming from what it saw is told its view is gone.
	w, err := env.Client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: seen.ResourceVersion})
	switch {
	case err != nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err):
		t.Errorf("watch from revision %d: %v, want 410", seenRev, err)
	case err == nil:
		select {
		case ev := <-w.ResultChan():
			if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != 410 {
				t.Errorf("watch from revision %d resumed (%s %T) instead of asking for a relist", seenRev, ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("watch from revision %d resumed silently instead of asking for a relist", seenRev)
		}
		w.Stop()
	}
	cli := dial(t, env)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	resp := <-cli.Watch(wctx, "/registry/configmaps/"+ns+"/", clientv3.WithPrefix(), clientv3.WithRev(seenRev+1))
	if resp.CompactRevision == 0 {
		t.Errorf("an etcd watch from revision %d was not refused as compacted: %+v", seenRev+1, resp)
	}
	// New writes get revisions beyond anything a client saw.
	made, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm("later"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rev, _ := strconv.ParseInt(made.ResourceVersion, 10, 64); rev <= bump {
		t.Errorf("a write after the restore got revision %d, not above the bump %d", rev, bump)
	}
	if out, ok := rampart(t, append([]string{"etcd", "check"}, etcdFlags(env)...)...); !ok || !strings.Contains(out, "0 undecodable") {
		t.Errorf("check on the restored etcd:\n%s", out)
	}
}

// restoreEtcd is docs/etcd.md's restore from the API server's stop (step 2)
// to its start (step 4): the API server and etcd stop, etcdutl restores
// snap into a new data directory with the extra flags, which takes the old
// one's place, and etcd and the API server start on it.
func restoreEtcd(t *testing.T, env *clustertest.Env, snap string, extra ...string) {
	t.Helper()
	etcdutl := etcdutlPath(t)
	for _, name := range []string{localcluster.APIServerName(0), "etcd"} {
		if err := env.StopComponent(name); err != nil {
			t.Fatal(err)
		}
	}
	member, peer := env.EtcdMember()
	restored := filepath.Join(t.TempDir(), "etcd-restored")
	out, err := exec.Command(etcdutl, append([]string{"snapshot", "restore", snap, "--data-dir", restored,
		"--name", member, "--initial-cluster", member + "=" + peer, "--initial-advertise-peer-urls", peer}, extra...)...).CombinedOutput()
	t.Logf("etcdutl snapshot restore %s:\n%s", strings.Join(extra, " "), out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(env.EtcdDataDir(), env.EtcdDataDir()+".before-restore"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(restored, env.EtcdDataDir()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := env.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.StartAPIServer(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// etcdutlPath is bin/k8s/etcdutl, checked before a test starts a cluster.
func etcdutlPath(t *testing.T) string {
	t.Helper()
	assets, _, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	etcdutl := filepath.Join(assets, "etcdutl")
	if _, err := os.Stat(etcdutl); err != nil {
		t.Fatalf("%s is missing: run make assets", etcdutl)
	}
	return etcdutl
}
