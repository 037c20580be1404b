package space

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
)

func TestAssess(t *testing.T) {
	const q = 100 << 20
	member := func(name string, db int64) Member { return Member{Name: name, DBSize: db, Quota: q} }
	for _, tc := range []struct {
		name  string
		s     Space
		level Level
		share float64
		worst string
	}{
		{"empty", Space{}, OK, 0, ""},
		{"under the share", Space{Members: []Member{member("a", 79<<20)}}, OK, 0.79, "a"},
		{"at the share", Space{Members: []Member{member("a", 80<<20)}}, Warning, 0.80, "a"},
		{"the fullest member decides", Space{Members: []Member{member("a", 10<<20), member("b", 90<<20), member("c", 20<<20)}}, Warning, 0.90, "b"},
		{"a member that did not answer is not counted", Space{Members: []Member{member("a", 10<<20), {Name: "b", Quota: q, Error: "down"}}}, OK, 0.10, "a"},
		{"alarm raised", Space{Members: []Member{member("a", 101<<20)}, NoSpace: []uint64{1}}, NoSpace, 1.01, "a"},
		// Defragmented but not disarmed: still read-only.
		{"alarm raised after a defragmentation", Space{Members: []Member{member("a", 5<<20)}, NoSpace: []uint64{1}}, NoSpace, 0.05, "a"},
		{"full without alarm yet", Space{Members: []Member{member("a", 100<<20)}}, Warning, 1, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Assess(tc.s, DefaultWarnShare)
			if v.Level != tc.level || v.Fullest.Name != tc.worst || v.Share < tc.share-1e-9 || v.Share > tc.share+1e-9 {
				t.Errorf("Assess = %s %.4f %q, want %s %.4f %q", v.Level, v.Share, v.Fullest.Name, tc.level, tc.share, tc.worst)
			}
		})
	}
}

func TestLeaderIsDefragmentedLast(t *testing.T) {
	got := leaderLast([]Member{{Name: "a"}, {Name: "b", Leader: true}, {Name: "c"}})
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, []string{"a", "c", "b"}) {
		t.Errorf("order %v, want a c b (followers in order, the leader last)", names)
	}
}

func TestWritesCountsRewritesAndCreatesAfterTheRevision(t *testing.T) {
	w := NewWrites(100)
	for _, e := range []source.Entry{
		{Key: []byte("/registry/configmaps/churn/big"), Value: make([]byte, 1000), ModRevision: 150},
		{Key: []byte("/registry/configmaps/churn/big2"), Value: make([]byte, 1000), ModRevision: 151},
		{Key: []byte("/registry/pods/web/p1"), Value: make([]byte, 5000), ModRevision: 90}, // before: not counted
		{Key: []byte("/registry/leases/kube-node-lease/n1"), Value: make([]byte, 100), ModRevision: 160},
		{Key: []byte("/registry/namespaces/churn"), Value: make([]byte, 10), ModRevision: 101},
	} {
		if err := w.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	top := w.Top(2)
	if len(top) != 2 || top[0].Prefix != "/registry/configmaps/churn/" || top[0].Keys != 2 || top[0].Bytes != 2000+2*int64(len("/registry/configmaps/churn/big"))+1 ||
		top[1].Prefix != "/registry/leases/kube-node-lease/" {
		t.Errorf("top = %+v", top)
	}
}

// TestMetricsFollowTheVerdict: the gauges the alerts read say what Assess
// decided, at the share where the alert must fire.
func TestMetricsFollowTheVerdict(t *testing.T) {
	const q = 100 << 20
	for _, tc := range []struct {
		db               int64
		alarm            bool
		warning, nospace float64
	}{{79 << 20, false, 0, 0}, {80 << 20, false, 1, 0}, {101 << 20, true, 1, 1}} {
		m := NewMetrics()
		s := Space{Members: []Member{{Name: "m1", DBSize: tc.db, Quota: q}}}
		if tc.alarm {
			s.NoSpace = []uint64{1}
		}
		m.Observe(s, Assess(s, DefaultWarnShare), []Grown{{Prefix: "/registry/configmaps/churn/", Bytes: 5 << 20}})
		if w, n := testutil.ToFloat64(m.warning), testutil.ToFloat64(m.noSpace); w != tc.warning || n != tc.nospace {
			t.Errorf("db %d of %d: warning %g nospace %g, want %g %g", tc.db, q, w, n, tc.warning, tc.nospace)
		}
		if r := testutil.ToFloat64(m.share.WithLabelValues("m1")); r != float64(tc.db)/q {
			t.Errorf("ratio %g", r)
		}
		if b := testutil.ToFloat64(m.written.WithLabelValues("/registry/configmaps/churn/")); b != 5<<20 {
			t.Errorf("written %g", b)
		}
	}
}
