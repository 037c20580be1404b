package backup_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	objbackup "github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// On a real control plane with the manager given a backup store: a
// scheduled Backup runs every few seconds into the store, keeps its newest
// two, and says so in its status and an Event; one that cannot run
// (a resource that does not exist) fails with the reason in its status, a
// Warning Event and rampart_backup_last_run_failed; one outside Rampart's
// namespace is not run; a schedule cron cannot read is refused by the API
// server. The same for etcd snapshots, from the local etcd with the
// client certificate in the Secret the local cluster makes: each one in
// the store verifies and the oldest are pruned; a Secret the manager is
// not allowed to read, one with a certificate from the wrong CA, and one
// lacking a key each say so.
func TestScheduledBackupsRunKeepAndReport(t *testing.T) {
	store := storage.Dir{Root: t.TempDir()}
	env := clustertest.Start(t, localcluster.Options{BackupStore: store.Root,
		ManagerArgs: []string{"--etcd-snapshot-secrets=etcd-wrong-ca,etcd-no-key,etcd-one-down"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prices"}, Data: map[string]string{"apple": "3"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "canary-sched-4b7e"}}); err != nil {
		t.Fatal(err)
	}
	every := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: "often"},
		Spec: v1alpha1.BackupSpec{Namespaces: []string{ns}, Schedule: "@every 2s", KeepLast: 2}}
	broken := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: "broken"},
		Spec: v1alpha1.BackupSpec{Resources: []string{"gizmos"}}}
	elsewhere := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"}, Spec: v1alpha1.BackupSpec{Namespaces: []string{ns}}}
	etcdEvery := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: "etcd-often"},
		Spec: v1alpha1.BackupSpec{Schedule: "@every 2s", KeepLast: 2, EtcdSnapshot: &v1alpha1.EtcdSnapshotSource{SecretName: localcluster.EtcdSnapshotSecret}}}
	etcdSecret := func(name string, files map[string]string) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: name},
			Data: map[string][]byte{"endpoints": []byte(env.EtcdURL())}}
		for key, file := range files {
			b, err := os.ReadFile(env.PKIFile(file))
			if err != nil {
				t.Fatal(err)
			}
			sec.Data[key] = b
		}
		if err := c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	etcdSecret("etcd-wrong-ca", map[string]string{"ca.crt": "ca.crt", "tls.crt": "etcd-client.crt", "tls.key": "etcd-client.key"})
	etcdSecret("etcd-no-key", map[string]string{"ca.crt": "etcd-ca.crt", "tls.crt": "etcd-client.crt"})
	// Root's: only etcd's root may take a snapshot once its
	// authentication is on, as on this cluster.
	etcdSecret("etcd-one-down", map[string]string{"ca.crt": "etcd-ca.crt", "tls.crt": "etcd-root.crt", "tls.key": "etcd-root.key"})
	// A member down (nothing listens on port 1) does not stop the snapshot.
	oneDown := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: localcluster.ManagerNamespace, Name: "etcd-one-down"}, oneDown); err != nil {
		t.Fatal(err)
	}
	oneDown.Data["endpoints"] = []byte("https://127.0.0.1:1, " + env.EtcdURL())
	if err := c.Update(ctx, oneDown); err != nil {
		t.Fatal(err)
	}
	etcdBackup := func(name, secret string) *v1alpha1.Backup {
		return &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: name},
			Spec: v1alpha1.BackupSpec{EtcdSnapshot: &v1alpha1.EtcdSnapshotSource{SecretName: secret}}}
	}
	wrongCA, noKey, notAllowed := etcdBackup("etcd-wrong-ca", "etcd-wrong-ca"), etcdBackup("etcd-no-key", "etcd-no-key"), etcdBackup("etcd-other", "kube-secrets")
	memberDown := etcdBackup("etcd-member-down", "etcd-one-down")
	for _, b := range []*v1alpha1.Backup{every, broken, elsewhere, etcdEvery, wrongCA, noKey, notAllowed, memberDown} {
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	bad := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: "bad"}, Spec: v1alpha1.BackupSpec{Schedule: "every day"}}
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.schedule") {
		t.Errorf("a schedule cron cannot read: %v", err)
	}

	mixed := etcdBackup("mixed", localcluster.EtcdSnapshotSecret)
	mixed.Spec.Namespaces = []string{ns}
	if err := c.Create(ctx, mixed); err == nil || !strings.Contains(err.Error(), "make a second Backup") {
		t.Errorf("an etcdSnapshot Backup with namespaces: %v", err)
	}

	dotted := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: localcluster.ManagerNamespace, Name: "shop.nightly"}}
	if err := c.Create(ctx, dotted); err == nil || !strings.Contains(err.Error(), "without dots") {
		t.Errorf("a Backup named with a dot: %v", err)
	}
	get := func(b *v1alpha1.Backup) *v1alpha1.Backup {
		got := &v1alpha1.Backup{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	runs := threeRunsTwoKept(ctx, t, get, every)
	got := get(every)
	if r := got.Status.LastSuccessfulRun; r.Objects < 4 || r.Size == 0 || r.Duration == "" || got.Status.NextScheduleTime == nil ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") || !meta.IsStatusConditionTrue(got.Status.Conditions, "Succeeded") {
		t.Errorf("status after runs: %+v", got.Status)
	}
	listed, err := objbackup.List(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	var owned []string
	for _, m := range listed {
		if m.Owner == localcluster.ManagerNamespace+"/often" {
			owned = append(owned, m.Name)
		}
	}
	if len(owned) > 3 || !slices.Contains(owned, got.Status.Kept[1]) || slices.Contains(owned, runs[0]) {
		t.Errorf("the store holds %v of often's backups (kept %v, first %s): want the oldest pruned", owned, got.Status.Kept, runs[0])
	}
	// What was backed up reads back, the Secret sealed with the local
	// cluster's key.
	_, objs, err := objbackup.Read(ctx, store, got.Status.Kept[1], nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(objs, func(o objbackup.Object) bool { return o.File.Name == "db" && o.File.KeyID != "" && o.Data == nil }) ||
		!slices.ContainsFunc(objs, func(o objbackup.Object) bool { return o.File.Name == "prices" }) {
		t.Errorf("backup %s holds %d objects, want prices and the sealed db", got.Status.Kept[1], len(objs))
	}

	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return get(broken).Status.LastRun != nil, nil
	}); err != nil {
		t.Fatal("the broken Backup never ran")
	}
	b := get(broken)
	if !strings.Contains(b.Status.LastRun.Error, "gizmos") || b.Status.ConsecutiveFailures != 1 || !meta.IsStatusConditionFalse(b.Status.Conditions, "Succeeded") {
		t.Errorf("the broken Backup's status: %+v", b.Status)
	}
	if cond := meta.FindStatusCondition(get(elsewhere).Status.Conditions, "Ready"); cond == nil || cond.Reason != "WrongNamespace" || get(elsewhere).Status.LastRun != nil {
		t.Errorf("a Backup outside Rampart's namespace: %+v", get(elsewhere).Status)
	}
	var evs corev1.EventList
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if err := c.List(ctx, &evs, client.InNamespace(localcluster.ManagerNamespace)); err != nil {
			return false, nil
		}
		var reasons []string
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason+"/"+e.InvolvedObject.Name)
		}
		return slices.Contains(reasons, "BackupSucceeded/often") && slices.Contains(reasons, "BackupFailed/broken") &&
			slices.Contains(reasons, "BackupSucceeded/etcd-often") && slices.Contains(reasons, "BackupFailed/etcd-no-key"), nil
	}); err != nil {
		t.Errorf("no BackupSucceeded and BackupFailed Events")
	}
	checkEtcdSnapshots(ctx, t, get, store, etcdEvery)
	for b, says := range map[*v1alpha1.Backup]string{wrongCA: "x509: certificate signed by unknown authority", noKey: "lacks tls.key"} {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return get(b).Status.LastRun != nil, nil
		}); err != nil {
			t.Fatalf("%s never ran", b.Name)
		}
		got := get(b)
		t.Logf("%s: %s", b.Name, got.Status.LastRun.Error)
		if !strings.Contains(got.Status.LastRun.Error, says) || !meta.IsStatusConditionFalse(got.Status.Conditions, "Succeeded") || len(got.Status.Kept) != 0 {
			t.Errorf("%s: want a failed run saying %q, status %+v", b.Name, says, got.Status)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return get(memberDown).Status.LastRun != nil, nil
	}); err != nil {
		t.Fatal("etcd-member-down never ran")
	}
	if r := get(memberDown).Status.LastRun; r.Error != "" || r.Revision == 0 {
		t.Errorf("a snapshot with one of two etcd endpoints down: %+v", r)
	}
	if cond := meta.FindStatusCondition(get(notAllowed).Status.Conditions, "Ready"); cond == nil || cond.Reason != "SecretNotAllowed" ||
		!strings.Contains(cond.Message, localcluster.EtcdSnapshotSecret) || !strings.Contains(cond.Message, "the Secret rampart up --backups made") {
		t.Errorf("a Backup naming a Secret the manager may not read: %+v", cond)
	}
	checkStatusShowsBackups(ctx, t, env)
	metrics, err := env.ScrapeManagerMetrics(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`rampart_backup_last_run_failed{backup="rampart-system/broken"} 1`, `rampart_backup_last_run_failed{backup="rampart-system/often"} 0`,
		`rampart_backup_runs_total{backup="rampart-system/often",result="succeeded"}`,
		`rampart_backup_last_run_failed{backup="rampart-system/etcd-often"} 0`, `rampart_backup_last_run_failed{backup="rampart-system/etcd-wrong-ca"} 1`,
		`rampart_backup_last_size_bytes{backup="rampart-system/etcd-often"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the manager's metrics lack %s", want)
		}
	}
}

// checkEtcdSnapshots waits for three runs of b with two kept, and checks
// that what the store holds is those two, each a whole snapshot of the
// local etcd.
func checkEtcdSnapshots(ctx context.Context, t *testing.T, get func(*v1alpha1.Backup) *v1alpha1.Backup, store storage.Dir, b *v1alpha1.Backup) {
	t.Helper()
	runs := threeRunsTwoKept(ctx, t, get, b)
	got := get(b)
	r := got.Status.LastSuccessfulRun
	t.Logf("etcd snapshot runs %v; last: %+v", runs, r)
	if r.Revision == 0 || r.Size == 0 || len(r.SHA256) != 64 || !strings.HasPrefix(r.Name, "etcd/etcd-often-") ||
		!strings.Contains(meta.FindStatusCondition(got.Status.Conditions, "Succeeded").Message, "bbolt check ok") {
		t.Errorf("etcd snapshot status: %+v", got.Status)
	}
	objs, err := store.List(ctx, "etcd/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	if len(names) > 3 || slices.Contains(names, runs[0]) || !slices.Contains(names, got.Status.Kept[0]) {
		t.Errorf("the store holds %v (kept %v, first %s): want the oldest pruned", names, got.Status.Kept, runs[0])
	}
	info, err := snapshot.Verify(filepath.Join(store.Root, got.Status.Kept[0]))
	if err != nil || !info.EtcdHash || info.Revision == 0 {
		t.Errorf("kept snapshot %s: %+v, %v", got.Status.Kept[0], info, err)
	}
}

// threeRunsTwoKept waits until b has succeeded three times and keeps two,
// and returns the runs seen.
func threeRunsTwoKept(ctx context.Context, t *testing.T, get func(*v1alpha1.Backup) *v1alpha1.Backup, b *v1alpha1.Backup) []string {
	t.Helper()
	var runs []string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		got := get(b)
		if r := got.Status.LastSuccessfulRun; r != nil && !slices.Contains(runs, r.Name) {
			runs = append(runs, r.Name)
		}
		return len(runs) >= 3 && len(got.Status.Kept) == 2, nil
	}); err != nil {
		t.Fatalf("%s: never three runs with two kept: runs %v, status %+v", b.Name, runs, get(b).Status)
	}
	return runs
}

// checkStatusShowsBackups runs rampart status as a user would: its
// BACKUPS section has a line per Backup run in Rampart's namespace, with
// what needs a look flagged.
func checkStatusShowsBackups(ctx context.Context, t *testing.T, env *clustertest.Env) {
	t.Helper()
	_, bin, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, "status", "--kubeconfig", env.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("rampart status: %v\n%s", err, out)
	}
	_, section, _ := strings.Cut(string(out), "\nBACKUPS\n")
	section, _, _ = strings.Cut(section, "\n\n")
	t.Logf("rampart status, BACKUPS:\n%s", section)
	lines := map[string]string{}
	for _, l := range strings.Split(section, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	for name, want := range map[string][]string{
		"often":         {"objects", "@every 2s", "Succeeded", "KiB"},
		"etcd-often":    {"etcd", "@every 2s", "Succeeded", "KiB", "rev "},
		"broken":        {"objects", "once", "Failed: ", "gizmos", "FAILING (1 in a row)"},
		"etcd-wrong-ca": {"etcd", "once", "Failed: ", "FAILING (1 in a row)"},
		"etcd-other":    {"etcd", "never", "NOT READY (SecretNotAllowed)"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[name], w) {
				t.Errorf("rampart status's line for %s lacks %q: %q", name, w, lines[name])
			}
		}
	}
	if _, ok := lines["elsewhere"]; ok {
		t.Errorf("rampart status lists a Backup outside Rampart's namespace")
	}
}
