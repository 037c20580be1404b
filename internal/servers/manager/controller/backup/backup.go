package backup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rampart-io/rampart/api/v1alpha1"
	objbackup "github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/plumbing/installation"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// The metrics of scheduled backups, by Backup (NAMESPACE/NAME).
var (
	runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rampart_backup_runs_total",
		Help: "Backups the manager made for Backup objects, by Backup and result (succeeded, failed).",
	}, []string{"backup", "result"})
	lastFailed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rampart_backup_last_run_failed",
		Help: "1 when the Backup's last run failed (its status says why), else 0.",
	}, []string{"backup"})
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rampart_backup_last_success_timestamp_seconds",
		Help: "When the Backup's last successful run finished.",
	}, []string{"backup"})
	nextRun = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rampart_backup_next_run_timestamp_seconds",
		Help: "When the Backup's next scheduled run is due; a value long past means runs are late (the leader is down, stuck or slower than the schedule).",
	}, []string{"backup"})
	lastDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rampart_backup_last_duration_seconds",
		Help: "How long the Backup's last successful run took.",
	}, []string{"backup"})
	lastSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rampart_backup_last_size_bytes",
		Help: "The size of the Backup's last successful archive.",
	}, []string{"backup"})
	lastObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rampart_backup_last_objects",
		Help: "The objects the Backup's last successful run holds.",
	}, []string{"backup"})
)

func init() {
	metrics.Registry.MustRegister(runs, lastFailed, lastSuccess, nextRun, lastDuration, lastSize, lastObjects)
}

// Creator makes one backup (internal/backup's Creator).
type Creator interface {
	CreateFor(ctx context.Context, owner, name string, sel objbackup.Selection) (*objbackup.Manifest, error)
}

// Reconciler runs Backup objects on the leader.
type Reconciler struct {
	Client client.Client
	// Reader reads a Backup before deciding (default Client): the
	// manager's API reader, so that a status just written, not yet in the
	// cache, cannot have a run made twice.
	Reader client.Reader
	// Creator and Store are the manager's backup store; nil when it has
	// none (each Backup then says so in its Ready condition).
	Creator  Creator
	Store    storage.Store
	Recorder events.EventRecorder
	Clock    clock.Clock
	// Location names the store in messages, without credentials.
	Location string
	// Namespace is Rampart's: a Backup elsewhere is not run (whoever may
	// create one has the manager read every object for it).
	Namespace string
	// LateAfter is how late a run may start before it is reported late
	// (an Event); default one minute.
	LateAfter time.Duration
	// Snapshotter takes the etcd snapshots of Backups with an
	// etcdSnapshot; EtcdSecrets are the only Secrets they may name (the
	// manager's --etcd-snapshot-secrets).
	Snapshotter Snapshotter
	EtcdSecrets []string
	// InstalledBy is how the manager was installed: a Backup's message
	// names the way to give it a store or a Secret there.
	InstalledBy installation.Method
}

// giveStore is how to give the manager a backup store.
var giveStore = installation.Setting{
	Helm:   "set the chart's manager.backup.enabled and manager.backup.store",
	Up:     "start the cluster with rampart up --backups (a store in DIR/backups)",
	ByHand: "run it with --backup-store DIR or s3://BUCKET/PREFIX",
}

// allowSecret is how to let Backups name another etcd Secret.
var allowSecret = installation.Setting{
	Helm: "name one of those, or add it to the chart's manager.backup.etcdSnapshot.secretNames (which grants get on it alone)",
	// rampart up --backups makes the one Secret of its etcd and names it.
	Up:     "name one of those, the Secret rampart up --backups made for this cluster's etcd",
	ByHand: "name one of those, or add it to --etcd-snapshot-secrets and grant the manager get on it",
}

// Condition reasons.
const (
	ReasonNoStore          = "NoStore"
	ReasonWrongNamespace   = "WrongNamespace"
	ReasonInvalid          = "InvalidSpec"
	ReasonSecretNotAllowed = "SecretNotAllowed"
	ReasonScheduled        = "Scheduled"
	ReasonSucceeded        = "BackupSucceeded"
	ReasonFailed           = "BackupFailed"
	ReasonLate             = "BackupLate"
)

func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &v1alpha1.Backup{}
	if err := r.reader().Get(ctx, req.NamespacedName, b); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.forget(req.String())
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	before := b.Status.DeepCopy()
	key := req.String()
	now := r.Clock.Now()
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: ReasonScheduled, ObservedGeneration: b.Generation}
	d, err := Decide(b, now)
	switch {
	case r.Namespace != "" && b.Namespace != r.Namespace:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonWrongNamespace
		ready.Message = fmt.Sprintf("Backups are run only in Rampart's namespace, %s: create it there", r.Namespace)
		d = Decision{}
	case r.Creator == nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonNoStore
		ready.Message = "the manager has no backup store: " + r.InstalledBy.Say(giveStore)
		d = Decision{}
	case err != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonInvalid, err.Error()
		d = Decision{}
	case b.Spec.EtcdSnapshot != nil && (r.Snapshotter == nil || !slices.Contains(r.EtcdSecrets, b.Spec.EtcdSnapshot.SecretName)):
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonSecretNotAllowed
		allowed := "none"
		if len(r.EtcdSecrets) > 0 {
			allowed = strings.Join(r.EtcdSecrets, ", ")
		}
		ready.Message = fmt.Sprintf("the manager reads only the etcd Secrets its --etcd-snapshot-secrets names (%s), not %q: %s",
			allowed, b.Spec.EtcdSnapshot.SecretName, r.InstalledBy.Say(allowSecret))
		d = Decision{}
	default:
		ready.Message = "backing up to " + r.Location
	}
	meta.SetStatusCondition(&b.Status.Conditions, ready)
	b.Status.ObservedGeneration = b.Generation
	if d.Run {
		r.run(ctx, b, d, now)
	}
	b.Status.NextScheduleTime = nil
	if !d.Next.IsZero() {
		b.Status.NextScheduleTime = &metav1.Time{Time: d.Next}
		nextRun.WithLabelValues(key).Set(float64(d.Next.Unix()))
	} else {
		nextRun.DeleteLabelValues(key)
	}
	if !equality.Semantic.DeepEqual(before, &b.Status) {
		// Written even if the object changed during a run: a status lost
		// to a conflict would have the run made again.
		status := b.Status
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := r.reader().Get(ctx, req.NamespacedName, b); err != nil {
				return err
			}
			b.Status = status
			return r.Client.Status().Update(ctx, b)
		}); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if d.Next.IsZero() {
		return reconcile.Result{}, nil
	}
	// A run that outlasted its period is due again at once.
	return reconcile.Result{RequeueAfter: max(d.Next.Sub(r.Clock.Now()), time.Millisecond)}, nil
}

// run makes one backup for b, due at d.DueAt, prunes b's old ones and
// records the outcome in b's status, an Event and the metrics.
func (r *Reconciler) run(ctx context.Context, b *v1alpha1.Backup, d Decision, now time.Time) {
	key := b.Namespace + "/" + b.Name
	if late := now.Sub(d.DueAt); b.Spec.Schedule != "" && (late > cmp.Or(r.LateAfter, time.Minute) || d.Missed > 0) {
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonLate, "Backup",
			"the run due at %s starts %s late, %d run(s) missed before it (the leader was down, or a run outlasted the schedule)",
			d.DueAt.UTC().Format(time.RFC3339), late.Round(time.Second), d.Missed)
	}
	b.Status.LastScheduleTime = &metav1.Time{Time: d.DueAt}
	run, err := r.make(ctx, b, key, now)
	finished := run.Finished.Time
	name := run.Name
	succeeded := metav1.Condition{Type: "Succeeded", ObservedGeneration: b.Generation}
	if err == nil {
		var kept []string
		kept, err = r.prune(ctx, b, key)
		b.Status.Kept = kept
		if err != nil {
			err = fmt.Errorf("backup %s made, but pruning the old ones failed: %w", name, err)
		}
	}
	if err != nil {
		run.Error = err.Error()
		b.Status.ConsecutiveFailures++
		succeeded.Status, succeeded.Reason, succeeded.Message = metav1.ConditionFalse, ReasonFailed, run.Error
		runs.WithLabelValues(key, "failed").Inc()
		lastFailed.WithLabelValues(key).Set(1)
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonFailed, "Backup", "backup %s failed: %v", name, err)
	} else {
		b.Status.ConsecutiveFailures = 0
		b.Status.LastSuccessfulRun = run
		succeeded.Status, succeeded.Reason = metav1.ConditionTrue, ReasonSucceeded
		runs.WithLabelValues(key, "succeeded").Inc()
		lastFailed.WithLabelValues(key).Set(0)
		lastSuccess.WithLabelValues(key).Set(float64(finished.Unix()))
		lastDuration.WithLabelValues(key).Set(finished.Sub(now).Seconds())
		lastSize.WithLabelValues(key).Set(float64(run.Size))
		if b.Spec.EtcdSnapshot != nil {
			succeeded.Message = fmt.Sprintf("etcd snapshot %s: %d bytes, revision %d, sha256 %s, in %s (etcd hash ok, bbolt check ok, stored copy reads back)",
				name, run.Size, run.Revision, run.SHA256, run.Duration)
			lastObjects.DeleteLabelValues(key) // a snapshot is keys and revisions, not objects
			r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, ReasonSucceeded, "Backup",
				"%s in %s; to restore: rampart etcd snapshot get %s --store STORE (checked again), then etcdutl snapshot restore with --bump-revision and --mark-compacted, kubelets stopped (docs/etcd.md: Restoring an etcd snapshot without the kubelet trap)",
				succeeded.Message, r.Location, name)
		} else {
			succeeded.Message = fmt.Sprintf("backup %s: %d objects of %d resources, %d bytes, in %s", name, run.Objects, run.Resources, run.Size, run.Duration)
			lastObjects.WithLabelValues(key).Set(float64(run.Objects))
			r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, ReasonSucceeded, "Backup", "%s; restore with: rampart backup restore %s --dry-run", succeeded.Message, name)
		}
	}
	b.Status.LastRun = run
	meta.SetStatusCondition(&b.Status.Conditions, succeeded)
}

// make makes one object backup or etcd snapshot for b, started now.
func (r *Reconciler) make(ctx context.Context, b *v1alpha1.Backup, key string, now time.Time) (*v1alpha1.BackupRun, error) {
	run := &v1alpha1.BackupRun{Started: metav1.Time{Time: now}}
	var err error
	if b.Spec.EtcdSnapshot != nil {
		run.Name = etcdSnapshotName(b.Name, now)
		var info snapshot.Info
		info, err = r.Snapshotter.Snapshot(ctx, b.Spec.EtcdSnapshot.SecretName, run.Name)
		if err == nil {
			run.Size, run.Revision, run.SHA256 = info.Size, info.Revision, info.SHA256
		} else {
			// A copy stored but not read back whole must not count among
			// the kept and push a good one out.
			_ = r.Store.Delete(ctx, run.Name)
		}
	} else {
		run.Name = b.Name + "-" + now.UTC().Format(runTimeLayout)
		sel := objbackup.Selection{Namespaces: b.Spec.Namespaces, Resources: b.Spec.Resources, ExcludeResources: b.Spec.ExcludeResources, LabelSelector: b.Spec.LabelSelector}
		var m *objbackup.Manifest
		m, err = r.Creator.CreateFor(ctx, key, run.Name, sel)
		if err == nil {
			run.Objects, run.Resources, run.Size = int64(m.Objects), int64(len(m.Resources)), m.Size()
		}
	}
	finished := r.Clock.Now()
	run.Finished = &metav1.Time{Time: finished}
	run.Duration = finished.Sub(now).Round(time.Millisecond).String()
	return run, err
}

// prune deletes b's backups (or etcd snapshots) past its keepLast and
// retention and returns the names kept, oldest first.
func (r *Reconciler) prune(ctx context.Context, b *v1alpha1.Backup, key string) ([]string, error) {
	var names []string
	var started []time.Time
	del := func(name string) error { return objbackup.Delete(ctx, r.Store, name) }
	if b.Spec.EtcdSnapshot != nil {
		var err error
		if names, started, err = etcdSnapshots(ctx, r.Store, b.Name); err != nil {
			return nil, err
		}
		del = func(name string) error { return r.Store.Delete(ctx, name) }
	} else {
		all, err := objbackup.List(ctx, r.Store)
		if err != nil {
			return nil, err
		}
		for _, m := range all { // oldest first
			if m.Owner == key {
				names = append(names, m.Name)
				started = append(started, m.Started)
			}
		}
	}
	var retention time.Duration
	if b.Spec.Retention != "" {
		retention, _ = time.ParseDuration(b.Spec.Retention) // checked by Validate
	}
	keep, drop := Prune(names, started, int(cmp.Or(b.Spec.KeepLast, 7)), retention, r.Clock.Now())
	for _, n := range drop {
		if err := del(n); err != nil {
			return append(keep, drop[slices.Index(drop, n):]...), err
		}
	}
	return keep, nil
}

func (r *Reconciler) reader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

func (r *Reconciler) forget(key string) {
	for _, g := range []*prometheus.GaugeVec{lastFailed, lastSuccess, nextRun, lastDuration, lastSize, lastObjects} {
		g.DeleteLabelValues(key)
	}
	runs.DeleteLabelValues(key, "succeeded")
	runs.DeleteLabelValues(key, "failed")
}

// SetupWithManager runs the reconciler on the leader, one Backup at a
// time: a backup reads every object selected, and two at once would
// double the load on the API server.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).Named("backup").For(&v1alpha1.Backup{}).Complete(r)
}
