package backup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	objbackup "github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// creator fails while err is set, and otherwise says it backed up 5
// objects.
type creator struct {
	err   error
	names []string
}

func (c *creator) CreateFor(_ context.Context, owner, name string, sel objbackup.Selection) (*objbackup.Manifest, error) {
	c.names = append(c.names, name)
	if c.err != nil {
		return nil, c.err
	}
	return &objbackup.Manifest{Name: name, Owner: owner, Objects: 5, Resources: make([]objbackup.Resource, 2), Archive: &objbackup.Archive{Size: 2048}}, nil
}

// A scheduled Backup runs when due, not before; a failure is in its
// status, a Warning Event and rampart_backup_last_run_failed; a run
// started long after it was due is reported late; a success resets it all.
func TestReconcilerRunsOnScheduleAndReports(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC)
	b := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "rampart-system", Name: "nightly", CreationTimestamp: metav1.Time{Time: created}},
		Spec: v1alpha1.BackupSpec{Schedule: "0 * * * *", Namespaces: []string{"shop"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(b).WithStatusSubresource(b).Build()
	clk := clocktesting.NewFakeClock(created.Add(time.Minute))
	rec := events.NewFakeRecorder(10)
	cr := &creator{err: errors.New("listing pods: the server is unavailable")}
	r := &Reconciler{Client: c, Creator: cr, Store: storage.Dir{Root: t.TempDir()}, Recorder: rec, Clock: clk, Location: "/backups"}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "rampart-system", Name: "nightly"}}
	get := func() *v1alpha1.Backup {
		got := &v1alpha1.Backup{}
		if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	res, err := r.Reconcile(context.Background(), req)
	if err != nil || len(cr.names) != 0 || res.RequeueAfter != 58*time.Minute+30*time.Second {
		t.Fatalf("before the first due time: ran %v, requeue %v, %v", cr.names, res.RequeueAfter, err)
	}
	if got := get(); got.Status.NextScheduleTime == nil || !got.Status.NextScheduleTime.Time.Equal(created.Add(59*time.Minute+30*time.Second)) ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") {
		t.Fatalf("status before the first run: %+v", got.Status)
	}

	clk.SetTime(created.Add(3*time.Hour + 10*time.Minute)) // 13:10: 11:00, 12:00 missed, 13:00 due
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := get()
	if len(cr.names) != 1 || cr.names[0] != "nightly-20261125-131030" || got.Status.LastRun == nil || !strings.Contains(got.Status.LastRun.Error, "server is unavailable") ||
		got.Status.ConsecutiveFailures != 1 || !meta.IsStatusConditionFalse(got.Status.Conditions, "Succeeded") {
		t.Fatalf("after a failed run: ran %v, status %+v", cr.names, got.Status)
	}
	if v := testutil.ToFloat64(lastFailed.WithLabelValues("rampart-system/nightly")); v != 1 {
		t.Errorf("rampart_backup_last_run_failed %v, want 1", v)
	}
	ev := drain(rec)
	for _, want := range []string{"Warning BackupLate", "2 run(s) missed", "Warning BackupFailed"} {
		if !strings.Contains(ev, want) {
			t.Errorf("no Event saying %q", want)
		}
	}

	// Not again before 14:00, then a success.
	if _, err := r.Reconcile(context.Background(), req); err != nil || len(cr.names) != 1 {
		t.Fatalf("ran again before the next due time: %v, %v", cr.names, err)
	}
	cr.err = nil
	clk.SetTime(created.Add(4 * time.Hour))
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got = get()
	if len(cr.names) != 2 || got.Status.ConsecutiveFailures != 0 || got.Status.LastSuccessfulRun == nil || got.Status.LastSuccessfulRun.Objects != 5 ||
		got.Status.LastRun.Size != 2048 || !meta.IsStatusConditionTrue(got.Status.Conditions, "Succeeded") {
		t.Fatalf("after a successful run: ran %v, status %+v", cr.names, got.Status)
	}
	if v := testutil.ToFloat64(lastFailed.WithLabelValues("rampart-system/nightly")); v != 0 {
		t.Errorf("rampart_backup_last_run_failed %v after a success, want 0", v)
	}
	if ev := drain(rec); !strings.Contains(ev, "Normal BackupSucceeded") || !strings.Contains(ev, "rampart backup restore nightly-20261125-140030 --dry-run") {
		t.Errorf("events after a success: %q", ev)
	}
}

// Without a store, or with a schedule cron cannot read, a Backup is not
// Ready and says what to do; nothing runs.
func TestReconcilerSaysWhyItCannotRun(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		spec      v1alpha1.BackupSpec
		creator   Creator
		installed installation.Method
		reason    string
		says      string
	}{
		{name: "no store", reason: ReasonNoStore, says: "run it with --backup-store"},
		{name: "no store, chart", installed: installation.Helm, reason: ReasonNoStore, says: "set the chart's manager.backup.enabled and manager.backup.store"},
		{name: "no store, rampart up", installed: installation.Up, reason: ReasonNoStore, says: "start the cluster with rampart up --backups"},
		{name: "bad cron", spec: v1alpha1.BackupSpec{Schedule: "99 * * * *"}, creator: &creator{}, reason: ReasonInvalid, says: "five fields"},
	} {
		b := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "rampart-system", Name: "x"}, Spec: tt.spec}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(b).WithStatusSubresource(b).Build()
		r := &Reconciler{Client: c, Creator: tt.creator, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(time.Now()), InstalledBy: tt.installed}
		if tt.creator == nil {
			r.Creator = nil
		}
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "rampart-system", Name: "x"}}
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.Backup{}
		_ = c.Get(context.Background(), req.NamespacedName, got)
		cond := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tt.reason || !strings.Contains(cond.Message, tt.says) || got.Status.LastRun != nil {
			t.Errorf("%s: Ready %+v, last run %+v, want a message saying %q", tt.name, cond, got.Status.LastRun, tt.says)
		}
	}
}

func drain(rec *events.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

// snapshotter stores a small file under the name it is given, as if etcd
// had sent it.
type snapshotter struct {
	store   storage.Store
	secrets []string
}

func (s *snapshotter) Snapshot(ctx context.Context, secret, name string) (snapshot.Info, error) {
	s.secrets = append(s.secrets, secret)
	obj, err := s.store.Put(ctx, name, strings.NewReader("snapshot"))
	return snapshot.Info{Name: name, Size: obj.Size, SHA256: obj.SHA256, Revision: 42, EtcdHash: true}, err
}

// An etcdSnapshot Backup takes its snapshot through the Snapshotter with
// its Secret, names it etcd/NAME-TIME.db, keeps its newest keepLast and
// leaves other Backups' and hand-made snapshots alone; one naming a Secret
// the manager may not read is not Ready and says which it may.
func TestReconcilerTakesEtcdSnapshots(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store := storage.Dir{Root: t.TempDir()}
	for _, n := range []string{"etcd/nightly-20261120-010000.db", "etcd/nightly-20261121-010000.db", "etcd/nightly-b-20261101-010000.db", "etcd/nightly-by-hand.db"} {
		if _, err := store.Put(ctx, n, strings.NewReader("old")); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC)
	b := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "rampart-system", Name: "nightly", CreationTimestamp: metav1.Time{Time: created}},
		Spec: v1alpha1.BackupSpec{KeepLast: 2, EtcdSnapshot: &v1alpha1.EtcdSnapshotSource{SecretName: "etcd-client"}}}
	other := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "rampart-system", Name: "other", CreationTimestamp: metav1.Time{Time: created}},
		Spec: v1alpha1.BackupSpec{EtcdSnapshot: &v1alpha1.EtcdSnapshotSource{SecretName: "kube-secrets"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(b, other).WithStatusSubresource(b, other).Build()
	snap := &snapshotter{store: store}
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Creator: &creator{}, Store: store, Recorder: rec, Clock: clocktesting.NewFakeClock(created.Add(time.Minute)),
		Location: store.Root, Snapshotter: snap, EtcdSecrets: []string{"etcd-client"}}
	for _, name := range []string{"nightly", "other"} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "rampart-system", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	got := &v1alpha1.Backup{}
	_ = c.Get(ctx, client.ObjectKeyFromObject(b), got)
	want := "etcd/nightly-20261125-100130.db"
	if len(snap.secrets) != 1 || snap.secrets[0] != "etcd-client" || got.Status.LastSuccessfulRun == nil || got.Status.LastSuccessfulRun.Name != want ||
		got.Status.LastSuccessfulRun.Revision != 42 || !slices.Equal(got.Status.Kept, []string{"etcd/nightly-20261121-010000.db", want}) {
		t.Fatalf("after a run: snapshots with %v, status %+v", snap.secrets, got.Status)
	}
	objs, _ := store.List(ctx, "etcd/")
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	if !slices.Equal(names, []string{"etcd/nightly-20261121-010000.db", want, "etcd/nightly-b-20261101-010000.db", "etcd/nightly-by-hand.db"}) {
		t.Errorf("the store holds %v", names)
	}
	if ev := drain(rec); !strings.Contains(ev, "Normal BackupSucceeded etcd snapshot "+want) || !strings.Contains(ev, "--bump-revision") {
		t.Errorf("events: %q", ev)
	}
	if v := testutil.ToFloat64(lastSize.WithLabelValues("rampart-system/nightly")); v != 8 {
		t.Errorf("rampart_backup_last_size_bytes %v, want 8", v)
	}
	_ = c.Get(ctx, client.ObjectKeyFromObject(other), got)
	if cond := meta.FindStatusCondition(got.Status.Conditions, "Ready"); cond == nil || cond.Reason != ReasonSecretNotAllowed ||
		!strings.Contains(cond.Message, "(etcd-client), not \"kube-secrets\"") || got.Status.LastRun != nil {
		t.Errorf("a Backup naming a Secret not allowed: %+v, last run %+v", cond, got.Status.LastRun)
	}
}
