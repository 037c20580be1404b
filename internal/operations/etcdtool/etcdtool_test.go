package etcdtool_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage/s3test"
)

func TestMain(m *testing.M) {
	clustertest.Main(m, localcluster.Options{Unprotected: true})
}

func etcdFlags(env *clustertest.Env) []string {
	return []string{"--endpoints=" + env.EtcdURL(), "--cacert=" + env.PKIFile("etcd-ca.crt"),
		"--cert=" + env.PKIFile("etcd-client.crt"), "--key=" + env.PKIFile("etcd-client.key")}
}

// rampart runs the binary as a user would and returns its output and
// whether it succeeded.
func rampart(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	_, bin, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	t.Logf("$ rampart %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return string(out), err == nil
}

func dial(t *testing.T, env *clustertest.Env) *clientv3.Client {
	t.Helper()
	cli, err := source.Client{Endpoints: []string{env.EtcdURL()}, CACert: env.PKIFile("etcd-ca.crt"),
		Cert: env.PKIFile("etcd-client.crt"), Key: env.PKIFile("etcd-client.key")}.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCheckFindsACorruptedObjectAndItsRemovalRestoresList corrupts a
// ConfigMap in etcd, as a disk fault or a bad manual edit would, and walks
// the operator's path: LIST fails, the check names the key and the delete,
// the delete makes LIST work again.
func TestCheckFindsACorruptedObjectAndItsRemovalRestoresList(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := "etcd-check"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"good", "victim"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": "v"}}
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cli := dial(t, env)
	key := "/registry/configmaps/" + ns + "/victim"
	// A protobuf envelope whose body is cut short.
	if _, err := cli.Put(ctx, key, "k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\xff\x01"); err != nil {
		t.Fatal(err)
	}
	var listErr error
	eventually(t, "LIST of the namespace's ConfigMaps to fail", func() bool {
		_, listErr = env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return listErr != nil
	})
	t.Logf("LIST fails as expected: %v", listErr)

	// A snapshot taken now holds the corruption: the check finds it there
	// too, and the snapshot keeps the bad value for later study.
	dir := t.TempDir()
	out, ok := rampart(t, append([]string{"etcd", "snapshot", "save", "--dir=" + dir, "--name=before-fix.db"}, etcdFlags(env)...)...)
	if !ok || !strings.Contains(out, "etcd hash ok, bbolt check ok") {
		t.Fatalf("snapshot save failed:\n%s", out)
	}
	out, ok = rampart(t, "etcd", "check", "--snapshot="+filepath.Join(dir, "before-fix.db"))
	if ok || !strings.Contains(out, "\n"+key+"\n") {
		t.Fatalf("check of the snapshot did not name %s:\n%s", key, out)
	}

	out, ok = rampart(t, append([]string{"etcd", "check"}, etcdFlags(env)...)...)
	if ok {
		t.Fatal("check succeeded with a corrupted object in etcd")
	}
	if !strings.Contains(out, "1 undecodable") || !strings.Contains(out, "First take a snapshot") {
		t.Fatalf("check output lacks the count or the snapshot warning:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^  remove: (ETCDCTL_API=3 etcdctl .* del -- (\S+))$`).FindStringSubmatch(out)
	if m == nil || m[2] != key {
		t.Fatalf("check did not print the delete for %s:\n%s", key, out)
	}
	if strings.Contains(out, "/good") {
		t.Fatalf("check named a good object:\n%s", out)
	}
	// Run the printed delete. There is no etcdctl in the local cluster's
	// binaries; the printed key goes to the same Delete call etcdctl del
	// makes.
	resp, err := cli.Delete(ctx, m[2])
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("delete %s: %v (deleted %d)", m[2], err, resp.Deleted)
	}
	eventually(t, "LIST to work again", func() bool {
		l, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		var names []string
		for _, cm := range l.Items {
			names = append(names, cm.Name)
		}
		return slices.Contains(names, "good") && !slices.Contains(names, "victim")
	})
	out, ok = rampart(t, append([]string{"etcd", "check"}, etcdFlags(env)...)...)
	if !ok || !strings.Contains(out, " 0 undecodable") {
		t.Fatalf("check after the fix:\n%s", out)
	}
}

// TestSnapshotSaveVerifyAndUsage saves a verified snapshot of the running
// etcd and reads usage from it and from the live etcd.
func TestSnapshotSaveVerifyAndUsage(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := "etcd-usage"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns}, Data: map[string]string{"k": strings.Repeat("x", 600_000)}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Three more revisions of the big object: history a snapshot shows.
	for i := range 3 {
		big.Data["i"] = strings.Repeat("y", i+1)
		var err error
		if big, err = env.Client.CoreV1().ConfigMaps(ns).Update(ctx, big, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	out, ok := rampart(t, append([]string{"etcd", "snapshot", "save", "--dir=" + dir, "--name=etcd/s1.db"}, etcdFlags(env)...)...)
	if !ok {
		t.Fatal("snapshot save failed")
	}
	file := filepath.Join(dir, "etcd", "s1.db")
	sum, err := os.ReadFile(file + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, strings.Fields(string(sum))[0]) {
		t.Fatalf("saved checksum %s not reported:\n%s", sum, out)
	}
	out, ok = rampart(t, "etcd", "snapshot", "verify", file)
	if !ok || !strings.Contains(out, "etcd hash ok") {
		t.Fatalf("verify:\n%s", out)
	}
	// A flipped byte in the middle is caught.
	damaged := filepath.Join(dir, "damaged.db")
	b, _ := os.ReadFile(file)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, ok := rampart(t, "etcd", "snapshot", "verify", damaged); ok || !strings.Contains(out, "damaged") {
		t.Fatalf("damaged snapshot verified:\n%s", out)
	}

	out, ok = rampart(t, "etcd", "usage", "--snapshot="+file, "--top=3")
	if !ok {
		t.Fatal("usage on the snapshot failed")
	}
	// The largest object is the big ConfigMap, with its 4 revisions.
	if !regexp.MustCompile(`(?m)^/registry/configmaps/etcd-usage/big\s+6\d\d\d\d\d\s+4\s*$`).MatchString(out) {
		t.Fatalf("usage on the snapshot did not list the big ConfigMap with 4 revisions first:\n%s", out)
	}
	if !strings.Contains(out, "every revision kept") {
		t.Fatalf("snapshot usage should count history:\n%s", out)
	}
	out, ok = rampart(t, append([]string{"etcd", "usage", "--top=3"}, etcdFlags(env)...)...)
	if !ok || !regexp.MustCompile(`(?m)^/registry/configmaps/etcd-usage/big\s+6\d\d\d\d\d\s+1\s*$`).MatchString(out) {
		t.Fatalf("usage on the live etcd did not list the big ConfigMap:\n%s", out)
	}
	if out, ok := rampart(t, "etcd", "check", "--snapshot="+file); !ok || !strings.Contains(out, "0 undecodable") {
		t.Fatalf("check on a healthy snapshot:\n%s", out)
	}
	// A stored copy damaged since it was saved is not handed out.
	b, _ = os.ReadFile(file)
	b[len(b)/3] ^= 0xff
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "s1.db")
	if out, ok := rampart(t, "etcd", "snapshot", "get", "etcd/s1.db", "--dir="+dir, "--to="+to); ok || !strings.Contains(out, "checksum") {
		t.Fatalf("snapshot get of a damaged copy:\n%s", out)
	}
	if _, err := os.Stat(to); err == nil {
		t.Errorf("snapshot get left %s from a damaged copy", to)
	}
}

// A snapshot goes to an S3 bucket as it goes to a directory: verified
// first, stored with its checksum, readable back whole; the output names
// the bucket, never the credentials.
func TestSnapshotSaveToS3(t *testing.T) {
	env := clustertest.Get(t)
	srv := s3test.Start(t)
	srv.Bucket(t, "etcd-snapshots")
	location := srv.Location("etcd-snapshots", "prod")
	out, ok := rampart(t, append([]string{"etcd", "snapshot", "save", "--store=" + location, "--name=etcd/s3.db", "--tmp-dir=" + t.TempDir()}, etcdFlags(env)...)...)
	if !ok || !strings.Contains(out, "saved etcd/s3.db in s3://etcd-snapshots/prod") || strings.Contains(out, s3test.SecretKey) {
		t.Fatalf("snapshot save to S3:\n%s", out)
	}
	if out, ok := rampart(t, "etcd", "snapshot", "list", "--store="+location); !ok || !regexp.MustCompile(`(?m)^etcd/s3\.db\s+[0-9.]+ [KM]iB\s`).MatchString(out) {
		t.Fatalf("snapshot list on S3:\n%s", out)
	}
	// Out of the bucket to a file, as a restore starts.
	file := filepath.Join(t.TempDir(), "s3.db")
	if out, ok := rampart(t, "etcd", "snapshot", "get", "etcd/s3.db", "--store="+location, "--to="+file); !ok ||
		!strings.Contains(out, "store checksum ok, etcd hash ok, bbolt check ok") || !strings.Contains(out, "--bump-revision") {
		t.Fatalf("snapshot get from S3:\n%s", out)
	}
	if out, ok := rampart(t, "etcd", "snapshot", "verify", file); !ok || !strings.Contains(out, "etcd hash ok") {
		t.Fatalf("the snapshot read back from S3 does not verify:\n%s", out)
	}
	if out, ok := rampart(t, "etcd", "snapshot", "get", "etcd/s3.db", "--store="+location, "--to="+file); ok || !strings.Contains(out, "exists") {
		t.Fatalf("snapshot get over an existing file:\n%s", out)
	}
}
