package drill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// etcdNoSpace: a runaway writer rewrites large objects until etcd's
// database outgrows its quota and etcd refuses every write, while a
// business client reads and writes one small object. Unprotected, nobody
// acts within the drill's time. Protected, the space guard's condition
// (space.Assess, what the manager exports and alerts on) fires before the
// alarm, and at the alarm an operator follows the runbook: stop the
// writer the alert names, then `rampart etcd space recover`.
var etcdNoSpace = Drill{
	Name:     "etcd-nospace",
	Incident: "a surge of writes fills etcd to its quota; etcd raises NOSPACE and refuses every write until someone compacts, defragments and disarms by hand (Pinterest report, 2020 outage)",
	Run:      runEtcdNoSpace,
}

const (
	// noSpaceRoom is the room above the database's size the drill's quota
	// leaves, at scale 1.
	noSpaceRoom = 128 << 20
	// noSpaceHold is how long the drill watches after the alarm, at
	// scale 1: the time an operator has not acted in, unprotected.
	noSpaceHold = 20 * time.Second
	// writerObjectBytes is each rewritten ConfigMap's data: half the API
	// server's 1 MiB limit on a ConfigMap.
	writerObjectBytes = 512 << 10
)

func runEtcdNoSpace(ctx context.Context, t Target) (Loss, error) {
	hold := max(noSpaceHold/time.Duration(t.Scale), 10*time.Second)
	loss := Loss{Unit: "seconds without business writes", Total: int(hold.Seconds())}
	if t.Local == nil {
		return loss, errors.New("etcd-nospace restarts the local cluster's etcd with a small quota: run it without --kubeconfig")
	}
	cli, err := t.dialEtcd(ctx, localcluster.EtcdRootUser)
	if err != nil {
		return loss, err
	}
	defer cli.Close()
	ns := t.Prefix + "-nospace"
	if err := t.namespace(ctx, ns, nil); err != nil {
		return loss, err
	}
	defer t.cleanupNamespace(ns)
	cms := t.Client.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{}); err != nil {
		return loss, err
	}

	// Start from a compacted, defragmented database (as after the API
	// server's own compaction and a maintenance defrag), so the quota
	// leaves the same room whatever ran before.
	before, err := space.Measure(ctx, cli, 0)
	if err != nil {
		return loss, err
	}
	original := before.Members[0].Quota
	if _, err := cli.Compact(ctx, before.Members[0].Revision, clientv3.WithCompactPhysical()); err != nil && !strings.Contains(err.Error(), "compacted") {
		return loss, err
	}
	if _, err := cli.Defragment(ctx, t.Local.EtcdURL()); err != nil {
		return loss, err
	}
	st, err := cli.Status(ctx, t.Local.EtcdURL())
	if err != nil {
		return loss, err
	}
	quota := st.DbSize + noSpaceRoom/int64(t.Scale)
	if err := t.Local.SetEtcdQuota(ctx, quota); err != nil {
		return loss, err
	}
	defer func() {
		// Leave the cluster as found: nothing refused, the quota back.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = recoverQuietly(cctx, t)
		_ = t.Local.SetEtcdQuota(cctx, original)
	}()
	// The restarted etcd's client reconnects; wait for a write to pass.
	if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cms.Patch(ctx, "orders", "application/merge-patch+json", []byte(`{"data":{"n":"1"}}`), metav1.PatchOptions{})
		return err == nil, nil
	}); err != nil {
		return loss, fmt.Errorf("writes after etcd's restart: %w", err)
	}
	// etcd's own client, re-dialled: the restart closed the first one's
	// connection.
	cli.Close()
	if cli, err = t.dialEtcd(ctx, localcluster.EtcdRootUser); err != nil {
		return loss, err
	}

	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	biz := &businessWrites{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); biz.run(runCtx, t, ns) }()
	writerCtx, stopWriter := context.WithCancel(runCtx)
	defer stopWriter()
	var written int64
	var wmu sync.Mutex
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			value := strings.Repeat(string(rune('a'+w)), writerObjectBytes)
			for i := 0; writerCtx.Err() == nil; i++ {
				name := fmt.Sprintf("cache-%d-%d", w, i%4)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"blob": value + fmt.Sprint(i)}}
				_, err := cms.Update(writerCtx, cm, metav1.UpdateOptions{})
				if err != nil && strings.Contains(err.Error(), "not found") {
					_, err = cms.Create(writerCtx, cm, metav1.CreateOptions{})
				}
				if err == nil {
					wmu.Lock()
					written += writerObjectBytes
					wmu.Unlock()
				} else {
					time.Sleep(100 * time.Millisecond) // refused: a controller's retry
				}
			}
		}()
	}

	// What the guard sees, every 250 ms: the first Warning is the alert.
	start := time.Now()
	var alertAt, alarmAt time.Time
	var atAlarm space.Space
	err = poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		s, err := space.Measure(ctx, cli, 0)
		if err != nil {
			return false, nil // etcd busy: look again
		}
		v := space.Assess(s, space.DefaultWarnShare)
		if v.Level != space.OK && alertAt.IsZero() {
			alertAt = time.Now()
		}
		if v.Level == space.NoSpace {
			alarmAt, atAlarm = time.Now(), s
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return loss, fmt.Errorf("etcd never raised NOSPACE with a %s quota: %w", space.MiB(quota), err)
	}
	m := map[string]float64{
		"quota_mib":            float64(quota) / (1 << 20),
		"seconds_to_alarm":     seconds(alarmAt.Sub(start)),
		"db_mib_at_alarm":      math.Round(float64(atAlarm.Members[0].DBSize)/(1<<20)*10) / 10,
		"writer_mib_before_it": float64(written) / (1 << 20),
	}
	if t.Protected {
		// Recovery takes seconds, not none: protected, writes must be back
		// within half the window.
		loss.Bound = loss.Total / 2
		m["alert_seconds_before_alarm"] = seconds(alarmAt.Sub(alertAt))
		// The runbook: stop what the alert names as growing, then recover.
		stopWriter()
		dir, err := os.MkdirTemp("", "etcd-nospace-")
		if err != nil {
			return loss, err
		}
		defer os.RemoveAll(dir)
		rstart := time.Now()
		res, err := space.Recovery{Store: storage.Dir{Root: dir}, Location: dir, Name: "etcd/before-recover.db", TmpDir: dir}.Run(ctx, cli)
		if err != nil {
			return loss, fmt.Errorf("recover: %w", err)
		}
		m["recover_seconds"] = seconds(time.Since(rstart))
		m["db_mib_after_recover"] = math.Round(float64(res.After.Members[0].DBSize)/(1<<20)*10) / 10
	}
	select {
	case <-ctx.Done():
		return loss, ctx.Err()
	case <-time.After(time.Until(alarmAt.Add(hold))):
	}
	stopAll()
	wg.Wait()
	without := biz.longestWithoutWrites(alarmAt.Add(hold))
	m["seconds_without_writes"] = seconds(without)
	m["business_read_errors"] = float64(biz.readErrors)
	loss.Lost = int(math.Ceil(without.Seconds()))
	loss.Lost = min(loss.Lost, loss.Total)
	loss.Measured = m
	if !strings.Contains(biz.lastRefusal, "database space exceeded") {
		return loss, fmt.Errorf("the business client's writes were never refused as etcd refuses them at NOSPACE (last error %q)", biz.lastRefusal)
	}
	return loss, nil
}

// recoverQuietly brings the cluster's etcd back after the drill, with a
// snapshot in a temporary directory it removes.
func recoverQuietly(ctx context.Context, t Target) error {
	cli, err := t.dialEtcd(ctx, localcluster.EtcdRootUser)
	if err != nil {
		return err
	}
	defer cli.Close()
	dir, err := os.MkdirTemp("", "etcd-nospace-cleanup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, err = space.Recovery{Store: storage.Dir{Root: dir}, Location: dir, Name: "etcd/cleanup.db", TmpDir: dir}.Run(ctx, cli)
	return err
}

// businessWrites is a client that reads and writes one small object every
// 100 ms and remembers when its writes went through.
type businessWrites struct {
	mu          sync.Mutex
	ok          []time.Time
	readErrors  int
	lastRefusal string
}

func (b *businessWrites) run(ctx context.Context, t Target, ns string) {
	cms := t.Client.CoreV1().ConfigMaps(ns)
	for i := 0; ctx.Err() == nil; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, rerr := cms.Get(rctx, "orders", metav1.GetOptions{})
		_, werr := cms.Patch(rctx, "orders", "application/merge-patch+json", fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i), metav1.PatchOptions{})
		cancel()
		now := time.Now()
		b.mu.Lock()
		if rerr != nil && ctx.Err() == nil {
			b.readErrors++
		}
		if werr == nil {
			b.ok = append(b.ok, now)
		} else if ctx.Err() == nil {
			b.lastRefusal = werr.Error()
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// longestWithoutWrites is the longest time between two accepted writes,
// or from the last one to end.
func (b *businessWrites) longestWithoutWrites(end time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(b.ok); i++ {
		longest = max(longest, b.ok[i].Sub(b.ok[i-1]))
	}
	if n := len(b.ok); n > 0 {
		longest = max(longest, end.Sub(b.ok[n-1]))
	}
	return longest
}
