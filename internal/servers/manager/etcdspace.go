package manager

import (
	"context"
	"encoding/json"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	backupcontroller "github.com/rampart-io/rampart/internal/servers/manager/controller/backup"
)

// SpaceConfigMap is where the leader publishes its last look at etcd's
// space (rampart status shows it, the gateway's brake reads it).
const SpaceConfigMap = space.ReportConfigMap

// SpaceKey is the ConfigMap's key holding the look as JSON.
const SpaceKey = space.ReportKey

// SpaceReport is what the leader publishes.
type SpaceReport = space.Report

var spaceMetrics = space.NewMetrics()

func init() { metrics.Registry.MustRegister(spaceMetrics.Collectors()...) }

// spaceWatch looks at etcd's space every interval on the leader, with the
// credentials of one Secret (--etcd-space-secret), sets the gauges the
// RampartEtcdSpaceLow and RampartEtcdNoSpace alerts read and publishes
// the look for rampart status. Every replica could look, but one look is
// enough for etcd and for the alerts.
type spaceWatch struct {
	reader    client.Reader
	client    client.Client
	namespace string
	secret    string
	every     time.Duration
	warnShare float64
	quota     int64
	log       logr.Logger
	since     int64
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *spaceWatch) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (w *spaceWatch) Start(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		r := w.look(ctx)
		if r.Error != "" {
			w.log.Error(nil, "etcd space: cannot look", "secret", w.secret, "error", r.Error)
		}
		if err := w.publish(ctx, r); err != nil {
			w.log.Error(err, "etcd space: publishing", "configmap", SpaceConfigMap)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (w *spaceWatch) look(ctx context.Context) SpaceReport {
	r := SpaceReport{WarnShare: w.warnShare, Since: w.since}
	c, err := backupcontroller.EtcdClientFromSecret(ctx, w.reader, w.namespace, w.secret)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	cli, err := c.Dial(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer cli.Close()
	if r.Space, err = space.Measure(ctx, cli, w.quota); err != nil {
		r.Error = err.Error()
		return r
	}
	r.Verdict = space.Assess(r.Space, w.warnShare)
	writes := space.NewWrites(w.since)
	rev, err := source.WalkLive(ctx, cli, "/", writes.Add)
	if err != nil {
		r.Error = err.Error()
	} else {
		r.Written = writes.Top(5)
		w.since = rev
	}
	spaceMetrics.Observe(r.Space, r.Verdict, r.Written)
	return r
}

// +kubebuilder:rbac:groups="",namespace=rampart-system,resources=configmaps,verbs=get;update,resourceNames=rampart-etcd-space

func (w *spaceWatch) publish(ctx context.Context, r SpaceReport) error {
	r.At, r.Every = time.Now(), w.every
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return publishConfigMap(ctx, w.client, w.namespace, SpaceConfigMap, SpaceKey, raw)
}
