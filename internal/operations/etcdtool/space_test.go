package etcdtool_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// spaceExceeded is what etcd, and the API server after it, answer every
// write once the NOSPACE alarm is raised.
const spaceExceeded = "database space exceeded"

// TestSpaceRecoverBringsWritesBack fills a real etcd (a 24 MiB quota) to
// its NOSPACE alarm by rewriting one key, as a runaway writer would, and
// walks the runbook: the API server refuses a create, recover refuses to
// start without a verified snapshot (none named, then one it cannot
// store) and changes nothing, then with a store it snapshots, compacts,
// defragments and disarms, and the create goes through.
func TestSpaceRecoverBringsWritesBack(t *testing.T) {
	const quota = 24 << 20
	env := clustertest.Start(t, localcluster.Options{Unprotected: true, EtcdQuotaBytes: quota})
	cli := dial(t, env)
	ctx := context.Background()
	value := strings.Repeat("x", 512<<10)
	filled := false
	for i := 0; i < 400 && !filled; i++ {
		_, err := cli.Put(ctx, "/rampart-test/churn", value)
		if err != nil && strings.Contains(err.Error(), spaceExceeded) {
			filled = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !filled {
		t.Fatal("200 MiB of rewrites never filled a 24 MiB quota")
	}
	create := func() error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := env.Client.CoreV1().ConfigMaps("default").Create(cctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "after-"}}, metav1.CreateOptions{})
		return err
	}
	if err := create(); err == nil || !strings.Contains(err.Error(), spaceExceeded) {
		t.Fatalf("create on a full etcd: %v, want %q", err, spaceExceeded)
	}
	out, ok := rampart(t, append([]string{"etcd", "space", "status"}, etcdFlags(env)...)...)
	if !ok || !strings.HasPrefix(out, "NoSpace") || !strings.Contains(out, "rampart etcd space recover") {
		t.Fatalf("space status on a full etcd does not say NoSpace and the way out")
	}

	stillFull := func(what string) {
		t.Helper()
		s, err := space.Measure(ctx, cli, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.NoSpace) == 0 || s.Members[0].DBSize < quota {
			t.Fatalf("after %s: %s; want it untouched", what, space.Describe(s))
		}
	}
	out, ok = rampart(t, append([]string{"etcd", "space", "recover"}, etcdFlags(env)...)...)
	if ok || !strings.Contains(out, "refusing to recover: no verified snapshot") || !strings.Contains(out, "--dir DIR or --store") {
		t.Fatalf("recover without a store did not refuse, naming the flags")
	}
	stillFull("recover without a store")
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, ok = rampart(t, append([]string{"etcd", "space", "recover", "--dir", filepath.Join(notADir, "snapshots")}, etcdFlags(env)...)...)
	if ok || !strings.Contains(out, "refusing to recover: no verified snapshot") {
		t.Fatalf("recover with a store it cannot write did not refuse")
	}
	stillFull("recover with a store it cannot write")

	dir := t.TempDir()
	out, ok = rampart(t, append([]string{"etcd", "space", "recover", "--dir", dir, "--name", "etcd/before.db"}, etcdFlags(env)...)...)
	if !ok {
		t.Fatal("recover failed")
	}
	for _, step := range []string{"1. measured: ", "NOSPACE alarm raised", "2. snapshot etcd/before.db", "verified", "3. compacted history to revision",
		"4.1 defragmented member rampart-local", "5. disarmed 1 NOSPACE alarm(s)", "6. measured: ", "no NOSPACE alarm"} {
		if !strings.Contains(out, step) {
			t.Errorf("recover's output lacks %q", step)
		}
	}
	if _, err := snapshot.Verify(filepath.Join(dir, "etcd", "before.db")); err != nil {
		t.Errorf("the snapshot recover took: %v", err)
	}
	s, err := space.Measure(ctx, cli, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.NoSpace) > 0 || s.Members[0].DBSize > quota/2 {
		t.Errorf("after recover: %s; want no alarm and the database well under the quota", space.Describe(s))
	}
	if err := create(); err != nil {
		t.Errorf("create after recover: %v", err)
	}
}
