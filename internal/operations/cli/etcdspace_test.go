package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/manager"
)

// TestManagerWatchesEtcdSpace: a protected local cluster whose manager
// watches etcd's space as `rampart up` has it (the Secret with the local
// etcd's client certificate, get on it alone), with a 64 MiB quota. The
// manager first reports OK; a namespace rewriting 512 KiB ConfigMaps
// through the API server fills etcd past 80% of the quota; then the
// ConfigMap rampart-etcd-space says Warning and names the namespace's
// ConfigMaps as written most, the manager's metrics raise
// rampart_etcd_space_warning with the ratio etcd has, and rampart status
// shows the warning in ETCD SPACE with the way out.
func TestManagerWatchesEtcdSpace(t *testing.T) {
	const quota = 64 << 20
	env := clustertest.Start(t, localcluster.Options{EtcdSpace: true, EtcdQuotaBytes: quota, NoRecycleBin: true,
		ManagerArgs: []string{"--etcd-space-every=1s"}})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := rampartCLI(ctx, t, rampart, env)
	report := func() (manager.SpaceReport, bool) {
		var r manager.SpaceReport
		cm, err := env.Client.CoreV1().ConfigMaps(localcluster.ManagerNamespace).Get(ctx, manager.SpaceConfigMap, metav1.GetOptions{})
		if err != nil {
			return r, false
		}
		return r, json.Unmarshal([]byte(cm.Data[manager.SpaceKey]), &r) == nil
	}
	var r manager.SpaceReport
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		var ok bool
		r, ok = report()
		return ok && r.Error == "" && r.Verdict.Level == space.OK, nil
	}); err != nil {
		t.Fatalf("the manager never published an OK look in ConfigMap %s: %+v", manager.SpaceConfigMap, r)
	}
	if warning := scrapeGauge(ctx, t, env, "rampart_etcd_space_warning"); warning != 0 {
		t.Fatalf("rampart_etcd_space_warning %v before etcd was filled, want 0", warning)
	}

	// Fill through the API server, as a runaway writer would, until the
	// manager says Warning and names the writer's prefix: it names what
	// was written since its previous look, so the writer must still be
	// writing then. Past 80% a rewrite (512 KiB, under 1% of the quota)
	// every 300 ms gives the manager several looks (one a second) before
	// 95%, where the fill stops short of the NOSPACE alarm.
	// As the manager's space guard reads: etcd's authentication is on
	// (rampart up's default), and the reader may measure, not write.
	etcd, err := env.EtcdClient(localcluster.EtcdReaderUser).Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if _, err := etcd.Put(ctx, "/registry/configmaps/default/written-by-the-reader", "x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("the space guard's read-only etcd identity wrote /registry/: %v", err)
	}
	ns := env.Namespace(t)
	prefix := "/registry/configmaps/" + ns + "/"
	cms := env.Client.CoreV1().ConfigMaps(ns)
	blob := strings.Repeat("x", 512<<10)
	var share float64
	for i := 0; ; i++ {
		if share >= 0.95 || i == 200 {
			t.Fatalf("etcd at %.0f%% of its quota, and the manager's last look: %+v; want Warning naming %s", 100*share, r, prefix)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cache-%d", i%4)}, Data: map[string]string{"blob": blob + strconv.Itoa(i)}}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		s, err := space.Measure(ctx, etcd, 0)
		if err != nil {
			t.Fatal(err)
		}
		if share = space.Assess(s, space.DefaultWarnShare).Share; share < 0.8 {
			continue
		}
		r, _ = report()
		if r.Verdict.Level == space.Warning && slices.ContainsFunc(r.Written, func(g space.Grown) bool { return g.Prefix == prefix }) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("etcd at %.1f%% of its quota; the manager's look: %s at %.1f%%, written most %+v", 100*share, r.Verdict.Level, 100*r.Verdict.Share, r.Written)

	text, err := env.ScrapeManagerMetrics(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if warning := gauge(text, "rampart_etcd_space_warning"); warning != 1 {
		t.Errorf("rampart_etcd_space_warning %v at %.0f%% of the quota, want 1", warning, 100*share)
	}
	if alarm := gauge(text, "rampart_etcd_nospace_alarm"); alarm != 0 {
		t.Errorf("rampart_etcd_nospace_alarm %v short of the quota, want 0", alarm)
	}
	member := `{member="rampart-local"}`
	if used := gauge(text, "rampart_etcd_space_used_ratio"+member); used < 0.8 || used > 1 {
		t.Errorf("rampart_etcd_space_used_ratio%s %v, want at least 0.8 (etcd said %.3f)", member, used, share)
	}
	if q := gauge(text, "rampart_etcd_quota_backend_bytes"+member); q != quota {
		t.Errorf("rampart_etcd_quota_backend_bytes%s %v, want %d", member, q, quota)
	}

	status := run("status", "--rampart-namespace", localcluster.ManagerNamespace)
	_, section, _ := strings.Cut(status, "ETCD SPACE")
	section, _, _ = strings.Cut(section, "RECENT DENIALS")
	for _, want := range []string{"Warning at ", "warning from 80%", "rampart etcd space recover"} {
		if !strings.Contains(section, want) {
			t.Errorf("rampart status's ETCD SPACE lacks %q:\n%s", want, section)
		}
	}
}

// scrapeGauge is one unlabelled series of manager replica 0's metrics,
// read once its look is exported.
func scrapeGauge(ctx context.Context, t *testing.T, env *clustertest.Env, series string) float64 {
	t.Helper()
	text, err := env.ScrapeManagerMetrics(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	return gauge(text, series)
}

// gauge is the value of the series named exactly by series in a
// Prometheus text exposition, or -1 when there is none.
func gauge(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
