package manager

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rampart-io/rampart/api/v1alpha1"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/clusterview"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// unstoredCopies shows a journal whose copies do not reach their files:
// safe on disk, but only a restart's replay would store them.
var unstoredCopies = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "rampart_recyclebin_unstored_copies",
	Help: "Copies this replica's recycle-bin journal holds that are not stored as files in the bin's folder yet (normally 0 within milliseconds; growing: the folder refuses writes, see the log).",
})

func init() {
	metrics.Registry.MustRegister(recyclebin.Collectors()...)
	metrics.Registry.MustRegister(unstoredCopies)
}

// resumeWithin is how far back a starting manager looks for captures a
// previous run left unsettled.
const resumeWithin = 24 * time.Hour

// binRunnable runs the recycle bin's keeper on every replica: each settles
// the captures it made (and, at start, those left unsettled).
type binRunnable struct {
	keeper *recyclebin.Keeper
	// location is where the bin is, as shown in its summary: no
	// credentials.
	location string
	// journal is the bin's when it is a folder (storage.Journaled).
	journal *storage.Journaled
}

// openBinWithin bounds opening the bin's store (an S3 bucket is checked).
const openBinWithin = time.Minute

// recycleBin is the recycle bin the options ask for, or nil.
func recycleBin(ctx context.Context, cfg *rest.Config, o Options) (*binRunnable, error) {
	flag, location := "--recycle-bin-store", o.RecycleBinStore
	switch {
	case o.RecycleBinDir != "" && o.RecycleBinStore != "":
		return nil, errors.New("--recycle-bin-dir and --recycle-bin-store are both set: give one (--recycle-bin-store takes a directory too)")
	case o.RecycleBinDir != "":
		flag, location = "--recycle-bin-dir", o.RecycleBinDir
	case location == "":
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, openBinWithin)
	defer cancel()
	store, err := storage.Open(ctx, location)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	log := slog.New(logr.ToSlogHandler(o.Log.WithName("recyclebin")))
	var journal *storage.Journaled
	if d, ok := store.(storage.Dir); ok {
		// Made now, and readable by the manager only.
		if err := os.MkdirAll(d.Root, 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		// A capture waits for one synced append to the journal, not for
		// the three syncs of a file stored in the folder.
		if journal, err = storage.OpenJournaled(ctx, d, log); err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		store = journal
	}
	if s, ok := store.(fmt.Stringer); ok {
		location = s.String()
	}
	bin := &recyclebin.Bin{Store: store}
	if o.RecycleBinKeyFile != "" {
		key, err := recyclebin.LoadKey(o.RecycleBinKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--recycle-bin-key-file: %w", err)
		}
		bin.Key = key
	} else {
		o.Log.Info("the recycle bin has no key (--recycle-bin-key-file): deletes of protected Secrets will be refused, since a Secret is never kept in clear")
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &binRunnable{keeper: &recyclebin.Keeper{Bin: bin, Alive: recyclebin.MetadataLiveness(meta), Clock: clock.RealClock{}, Log: log,
		NotDeletedAfter: o.RecycleBinNotDeletedAfter}, location: location, journal: journal}, nil
}

// capturer is nil (no recycle bin) or the keeper.
func (b *binRunnable) capturer() rampartadmission.Capturer {
	if b == nil {
		return nil
	}
	return b.keeper
}

// Start implements manager.Runnable.
func (b *binRunnable) Start(ctx context.Context) error {
	b.keeper.Start(ctx, resumeWithin)
	if b.journal != nil {
		go wait.UntilWithContext(ctx, func(context.Context) { unstoredCopies.Set(float64(b.journal.Unstored())) }, 10*time.Second)
	}
	<-ctx.Done()
	if b.journal != nil {
		// What is journaled goes to the folder now; captures from here
		// on go to it directly.
		return b.journal.Close()
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: captures
// happen on every replica.
func (b *binRunnable) NeedLeaderElection() bool { return false }

// watcher is the leader's watch for deletes outside the API: labelled
// objects, and the scopes of ProtectionPolicies and RecyclePolicies read
// from the manager's cache (a change of either, or of a CRD, has it look
// again). It reads full objects from the views' informers.
func (b *binRunnable) watcher(ctx context.Context, mgr ctrl.Manager, views *clusterview.Views, recorder events.EventRecorder) (*outsideWatch, error) {
	if b == nil {
		return nil, nil
	}
	reader := mgr.GetCache()
	w := &recyclebin.Watcher{Bin: b.keeper.Bin, Objects: views.LastStates,
		Alive: b.keeper.Alive, Captured: b.keeper.Captured, Recorder: recorder, Clock: clock.RealClock{}, Log: b.keeper.Log,
		NamespaceLabels: views.Namespaces.NamespaceLabels, Scopes: func() []recyclebin.Scope { return keptScopes(reader) }}
	views.OnCRDChange(w.Poke)
	for _, obj := range []client.Object{&v1alpha1.ProtectionPolicy{}, &v1alpha1.RecyclePolicy{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { w.Poke() }, UpdateFunc: func(any, any) { w.Poke() },
		}); err != nil {
			return nil, err
		}
	}
	return &outsideWatch{w}, nil
}

// keptScopes are what policies keep: each enforced ProtectionPolicy that
// protects, and each RecyclePolicy.
func keptScopes(reader client.Reader) []recyclebin.Scope {
	ctx := context.Background()
	var out []recyclebin.Scope
	var pps v1alpha1.ProtectionPolicyList
	if reader.List(ctx, &pps) == nil {
		for _, p := range pps.Items {
			if p.Spec.Protection != "" && policy.Enforced(&p) {
				out = append(out, recyclebin.Scope{Resources: p.Spec.Resources, NamespaceSelector: p.Spec.NamespaceSelector, ObjectSelector: p.Spec.ObjectSelector})
			}
		}
	}
	var rps v1alpha1.RecyclePolicyList
	if reader.List(ctx, &rps) == nil {
		for _, p := range rps.Items {
			out = append(out, recyclebin.Scope{Resources: p.Spec.Resources, NamespaceSelector: p.Spec.NamespaceSelector, ObjectSelector: p.Spec.ObjectSelector})
		}
	}
	return out
}

// outsideWatch runs the watch on the leader only (one record per loss).
type outsideWatch struct{ w *recyclebin.Watcher }

// Start implements manager.Runnable.
func (o *outsideWatch) Start(ctx context.Context) error { return o.w.Start(ctx) }

// SummaryConfigMap is where the leader publishes what the recycle bin
// holds, for `rampart status`: the bin itself is off the cluster.
const SummaryConfigMap = "rampart-recycle-bin"

// SummaryKey is the ConfigMap's key holding the summary as JSON.
const SummaryKey = "summary.json"

// DefaultMaintainEvery is how often the leader evicts and sums up.
const DefaultMaintainEvery = time.Minute

// binMaintainer runs the recycle bin's maintenance on the leader.
type binMaintainer struct {
	m         *recyclebin.Maintainer
	client    client.Client
	namespace string
	location  string
	every     time.Duration
	log       logr.Logger
}

// +kubebuilder:rbac:groups="",namespace=rampart-system,resources=configmaps,verbs=get;update,resourceNames=rampart-recycle-bin

// maintainer is the leader's maintenance of the recycle bin, with limits
// read from RecyclePolicies in reader.
func (b *binRunnable) maintainer(c client.Client, reader client.Reader, o Options) *binMaintainer {
	if b == nil {
		return nil
	}
	limitsOf := func(name string) (recyclebin.Limits, bool) {
		if name == "" {
			return recyclebin.Limits{Retention: o.RecycleBinRetention}, true
		}
		p := &v1alpha1.RecyclePolicy{}
		if err := reader.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			return recyclebin.Limits{}, false
		}
		return recyclePolicyLimits(p), true
	}
	return &binMaintainer{m: &recyclebin.Maintainer{Bin: b.keeper.Bin, Clock: clock.RealClock{}, Log: b.keeper.Log, LimitsOf: limitsOf,
		Default: recyclebin.Limits{Retention: o.RecycleBinRetention}},
		client: c, namespace: o.Namespace, location: b.location, every: cmp.Or(o.RecycleBinMaintainEvery, DefaultMaintainEvery),
		log: o.Log.WithName("recyclebin")}
}

// recyclePolicyLimits reads a policy's retention (validated by the CRD:
// a duration) and size cap.
func recyclePolicyLimits(p *v1alpha1.RecyclePolicy) recyclebin.Limits {
	var l recyclebin.Limits
	if d, err := time.ParseDuration(p.Spec.Retention); err == nil {
		l.Retention = d
	}
	if p.Spec.MaxSize != nil {
		l.MaxBytes = p.Spec.MaxSize.Value()
	}
	return l
}

// Start implements manager.Runnable.
func (b *binMaintainer) Start(ctx context.Context) error {
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		s, err := b.m.Pass(ctx)
		if err != nil {
			b.log.Error(err, "recycle bin: maintenance pass")
		} else if err := b.publish(ctx, s); err != nil {
			b.log.Error(err, "recycle bin: publishing its summary", "configmap", SummaryConfigMap)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// published is the ConfigMap's summary: what the bin holds and where.
type published struct {
	recyclebin.Summary
	Location string `json:"location"`
}

func (b *binMaintainer) publish(ctx context.Context, s recyclebin.Summary) error {
	raw, err := json.Marshal(published{Summary: s, Location: b.location})
	if err != nil {
		return err
	}
	return publishConfigMap(ctx, b.client, b.namespace, SummaryConfigMap, SummaryKey, raw)
}

// publishConfigMap writes raw under key in the ConfigMap namespace/name,
// creating it if needed: what the leader publishes for rampart status.
func publishConfigMap(ctx context.Context, c client.Client, namespace, name, key string, raw []byte) error {
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
			Data: map[string]string{key: string(raw)}}
		return c.Create(ctx, cm)
	case err != nil:
		return err
	}
	cm.Data = map[string]string{key: string(raw)}
	return c.Update(ctx, cm)
}
