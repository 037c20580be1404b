// Package quotawatch keeps an eye on namespace capacity for `rampart quota
// plan` and for alerting: the leader records every namespace's peak pod use
// from the cluster view's pod cache into one ConfigMap, and every replica
// exports the used/hard ratio and headroom of every ResourceQuota.
//
// Why one ConfigMap in Rampart's namespace rather than an annotation on
// each namespace: it is one object the manager owns (RBAC grants it that one
// name, never an update of users' namespaces), one write covers every
// namespace, and writing it wakes no one who watches namespaces. Its size
// is bounded (quota.MaxNamespaces, a few hundred bytes each) and it is
// written rarely: only when a peak rose or a bucket rotated, at most once
// per WriteEvery, and once more on shutdown.
package quotawatch

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rampart-io/rampart/internal/operations/quota"
)

// +kubebuilder:rbac:groups="",namespace=rampart-system,resources=configmaps,verbs=get;update,resourceNames=rampart-quota-peaks

// PodSource is the cluster view's pod cache (clusterview.Informers).
type PodSource interface {
	PodsByNamespace() map[string][]quota.Pod
	HasSynced() bool
}

// Recorder samples every namespace's pod use and keeps the peaks in the
// ConfigMap quota.PeaksConfigMap in Namespace.
type Recorder struct {
	Client    client.Client
	Reader    client.Reader // live reads: the manager caches no ConfigMaps
	Pods      PodSource
	Namespace string
	// Every is the sampling period, WriteEvery the least time between
	// two writes, Window how long a peak counts.
	Every, WriteEvery, Window time.Duration
	Clock                     clock.WithTicker
	Log                       logr.Logger

	peaks     *quota.Peaks
	dirty     bool
	lastWrite time.Time
}

// Defaults of the recorder's periods.
const (
	DefaultEvery      = 30 * time.Second
	DefaultWriteEvery = 5 * time.Minute
)

// Setup adds the recorder (leader only) and the quota gauges (every
// replica) to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, pods PodSource, namespace string, log logr.Logger) error {
	// Start the ResourceQuota informer now, not at the first scrape.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.ResourceQuota{}); err != nil {
		return err
	}
	if err := metrics.Registry.Register(NewGauges(mgr.GetCache())); err != nil {
		return err
	}
	return mgr.Add(&Recorder{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Pods: pods, Namespace: namespace, Log: log})
}

func (r *Recorder) NeedLeaderElection() bool { return true }

func (r *Recorder) defaults() {
	if r.Every <= 0 {
		r.Every = DefaultEvery
	}
	if r.WriteEvery <= 0 {
		r.WriteEvery = DefaultWriteEvery
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
}

// Start samples until ctx ends, then writes what is unwritten.
func (r *Recorder) Start(ctx context.Context) error {
	r.defaults()
	tick := r.Clock.NewTicker(r.Every)
	defer tick.Stop()
	// A first sample as soon as the pods are cached, rather than a
	// whole period after a restart.
	for ctx.Err() == nil && !r.Pods.HasSynced() {
		select {
		case <-ctx.Done():
		case <-r.Clock.After(time.Second):
		}
	}
	if err := r.Sample(ctx); err != nil {
		r.Log.Error(err, "recording quota peaks; trying again", "in", r.Every)
	}
	for {
		select {
		case <-ctx.Done():
			flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := r.Flush(flush); err != nil {
				r.Log.Error(err, "writing quota peaks on shutdown")
			}
			return nil
		case <-tick.C():
			if err := r.Sample(ctx); err != nil {
				r.Log.Error(err, "recording quota peaks; trying again", "in", r.Every)
			}
		}
	}
}

// Sample records every namespace's use now, and writes the peaks when
// they changed and the last write is WriteEvery old.
func (r *Recorder) Sample(ctx context.Context) error {
	r.defaults()
	if !r.Pods.HasSynced() {
		return nil
	}
	if r.peaks == nil {
		if err := r.load(ctx); err != nil {
			return err
		}
	}
	sample := map[string]corev1.ResourceList{}
	for ns, pods := range r.Pods.PodsByNamespace() {
		sample[ns] = quota.PodUse(pods, quota.LimitDefaults(pods))
	}
	now := r.Clock.Now()
	if r.peaks.Observe(now, sample) {
		r.dirty = true
	}
	if r.dirty && now.Sub(r.lastWrite) >= r.WriteEvery {
		return r.Flush(ctx)
	}
	return nil
}

// Flush writes the peaks if they changed since the last write.
func (r *Recorder) Flush(ctx context.Context) error {
	if r.peaks == nil || !r.dirty {
		return nil
	}
	data, err := r.peaks.Encode()
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	err = r.Reader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: quota.PeaksConfigMap}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: quota.PeaksConfigMap,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
			Data: map[string]string{quota.PeaksKey: data}}
		err = r.Client.Create(ctx, cm)
	case err == nil:
		cm.Data = map[string]string{quota.PeaksKey: data}
		err = r.Client.Update(ctx, cm)
	}
	if err != nil {
		return err
	}
	r.dirty, r.lastWrite = false, r.Clock.Now()
	return nil
}

// load reads the stored peaks: a new leader, or a restarted one, carries
// on from them.
func (r *Recorder) load(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: quota.PeaksConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		r.peaks = &quota.Peaks{Window: r.Window}
		return nil
	}
	if err != nil {
		return err
	}
	p, err := quota.DecodePeaks(cm.Data[quota.PeaksKey])
	if err != nil {
		r.Log.Error(err, "stored quota peaks unreadable; starting afresh", "configmap", quota.PeaksConfigMap)
		p = &quota.Peaks{}
	}
	if r.Window > 0 {
		p.Window = r.Window
	}
	r.peaks = p
	return nil
}
