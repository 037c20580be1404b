package breaker

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestBreakerCycle(t *testing.T) {
	trip := &Trip{ErrorPercent: 50, ForSeconds: 5, MinRequestsPerSecond: 5, OpenFor: 30 * time.Second}
	type step struct {
		at         float64
		cfg        Config
		distressed bool // judged with this result when trip is set
		want       v1alpha1.BreakerState
		reason     string // a substring of the reason
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"open by hand, close ramps, ramp done closes", []step{
			{0, Config{Ramp: 10 * time.Second}, false, Closed, ""},
			{1, Config{Open: true, Ramp: 10 * time.Second}, false, Open, "opened by hand"},
			{100, Config{Open: true, Ramp: 10 * time.Second}, false, Open, "opened by hand"},
			{101, Config{Ramp: 10 * time.Second}, false, Ramping, "closed by hand"},
			{110, Config{Ramp: 10 * time.Second}, false, Ramping, "closed by hand"},
			{111, Config{Ramp: 10 * time.Second}, false, Closed, "ramp done"},
		}},
		{"rampSeconds 0 closes at once", []step{
			{1, Config{Open: true}, false, Open, "by hand"},
			{2, Config{}, false, Closed, "closed by hand"},
		}},
		{"trip opens, ramps after openSeconds, closes when distress is gone", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{4.9, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{34, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{35, Config{Ramp: 10 * time.Second, Trip: trip}, false, Ramping, "openSeconds"},
			{45, Config{Ramp: 10 * time.Second, Trip: trip}, false, Closed, "ramp done"},
		}},
		{"distress while ramping opens again", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{35, Config{Ramp: 10 * time.Second, Trip: trip}, false, Ramping, ""},
			{38, Config{Ramp: 10 * time.Second, Trip: trip}, true, Ramping, ""},
			{43, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{72, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
		}},
		{"distress still there when openSeconds end opens again at once", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{35, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
		}},
		{"distress broken off before forSeconds does not trip", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{3, Config{Ramp: 10 * time.Second, Trip: trip}, false, Closed, ""},
			{4, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{8.9, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{9, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
		}},
		{"open by hand wins over a trip and is not ended by openSeconds", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{6, Config{Open: true, Ramp: 10 * time.Second, Trip: trip}, true, Open, "by hand"},
			{100, Config{Open: true, Ramp: 10 * time.Second, Trip: trip}, false, Open, "by hand"},
		}},
		{"trip removed while tripped ramps back", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{6, Config{Ramp: 10 * time.Second}, false, Ramping, ""},
		}},
		{"no trip: distress is ignored", []step{
			{5, Config{Ramp: 10 * time.Second}, true, Closed, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(t0)
			for i, s := range tc.steps {
				b.Advance(s.cfg, s.cfg.Trip != nil, s.distressed, "tripped: 5xx answers 60%", at(s.at))
				if b.State != s.want || !strings.Contains(b.Reason, s.reason) {
					t.Fatalf("step %d (t=%gs): %s %q, want %s with %q", i, s.at, b.State, b.Reason, s.want, s.reason)
				}
			}
		})
	}
}

// While ramping, the share admitted grows linearly from none to all.
func TestRampShare(t *testing.T) {
	cfg := Config{Ramp: 10 * time.Second}
	b := New(t0)
	b.Advance(Config{Open: true}, false, false, "", at(0))
	if b.Admits(cfg, at(0), 0) {
		t.Fatal("an open breaker admitted a request")
	}
	b.Advance(cfg, false, false, "", at(100))
	for _, tc := range []struct {
		at    float64
		share float64
	}{{100, 0}, {102.5, 0.25}, {105, 0.5}, {109, 0.9}} {
		admitted := 0
		for i := range 1000 {
			if b.Admits(cfg, at(tc.at), float64(i)/1000) {
				admitted++
			}
		}
		if got := float64(admitted) / 1000; got < tc.share-0.01 || got > tc.share+0.01 {
			t.Errorf("at %gs into the ramp %.3f admitted, want %.2f", tc.at-100, got, tc.share)
		}
	}
}

func TestRefusalTellsWhatToDo(t *testing.T) {
	b := New(t0)
	cfg := Config{Ramp: 10 * time.Second}
	b.Advance(Config{Open: true}, false, false, "", at(0))
	msg, wait := b.Refusal("web", cfg, at(1))
	for _, want := range []string{`TrafficPolicy "web"`, "opened by hand", "rampart gateway breaker close --policy web", `kubectl patch trafficpolicy web --type merge -p '{"spec":{"breaker":{"open":false}}}'`} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q lacks %q", msg, want)
		}
	}
	if wait != byHandRetry {
		t.Errorf("wait %s, want %s", wait, byHandRetry)
	}
	tripped := New(t0)
	cfg.Trip = &Trip{OpenFor: 30 * time.Second}
	tripped.Advance(cfg, true, true, "tripped: p90 latency of short requests 12ms > latencyMilliseconds 5", at(0))
	if tripped.State != Open {
		t.Fatalf("tripped breaker %s", tripped.State)
	}
	msg, wait = tripped.Refusal("web", cfg, at(10))
	if !strings.Contains(msg, "p90 latency of short requests 12ms") || !strings.Contains(msg, "2026-03-01T12:00:30Z") || wait != 20*time.Second {
		t.Errorf("tripped refusal %q, wait %s: want the threshold, its value and when it ramps back (in 20s)", msg, wait)
	}
}

func TestJudge(t *testing.T) {
	trip := Trip{ErrorPercent: 50, TooManyRequestsPercent: 20, Latency: 100 * time.Millisecond, ForSeconds: 10, MinRequestsPerSecond: 5}
	for _, tc := range []struct {
		name   string
		record func(w *Window)
		want   string // "" not distressed, else a substring of the reason
	}{
		{"healthy", func(w *Window) { fill(w, 100, 200, 10*time.Millisecond) }, ""},
		{"5xx share", func(w *Window) { fill(w, 50, 200, time.Millisecond); fill(w, 50, 503, time.Millisecond) }, "5xx answers 50% >= errorPercent 50"},
		{"5xx just below", func(w *Window) { fill(w, 51, 200, time.Millisecond); fill(w, 49, 500, time.Millisecond) }, ""},
		{"429 share", func(w *Window) { fill(w, 70, 200, time.Millisecond); fill(w, 30, 429, time.Millisecond) }, "429 answers 30% >= tooManyRequestsPercent 20"},
		{"slow p90", func(w *Window) { fill(w, 85, 200, time.Millisecond); fill(w, 15, 200, 300*time.Millisecond) }, "p90 latency of short requests 3"},
		{"slow p80 only", func(w *Window) { fill(w, 92, 200, time.Millisecond); fill(w, 8, 200, 300*time.Millisecond) }, ""},
		{"too few answers", func(w *Window) { fill(w, 49, 503, time.Millisecond) }, ""},
		{"slow watches do not count", func(w *Window) {
			fill(w, 60, 200, time.Millisecond)
			for range 40 {
				w.Record(at(5), 200, time.Minute, true)
			}
		}, ""},
		{"answers older than forSeconds do not count", func(w *Window) {
			for range 100 {
				w.Record(at(-1), 503, time.Millisecond, false)
			}
			fill(w, 100, 200, time.Millisecond)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Window{}
			tc.record(w)
			s := w.Summarize(at(9.5), trip.ForSeconds)
			reason, distressed := Judge(trip, &s)
			if distressed != (tc.want != "") || !strings.Contains(reason, tc.want) {
				t.Errorf("Judge: %v %q, want %q", distressed, reason, tc.want)
			}
		})
	}
}

// fill records n answers spread over seconds 0 to 9.
func fill(w *Window, n, code int, latency time.Duration) {
	for i := range n {
		w.Record(at(float64(i%10)), code, latency, false)
	}
}

func TestPercentileWithinAnEighth(t *testing.T) {
	for _, d := range []time.Duration{3 * time.Microsecond, 900 * time.Microsecond, 1500 * time.Microsecond, 37 * time.Millisecond, 2 * time.Second, 90 * time.Second} {
		w := &Window{}
		for range 10 {
			w.Record(t0, 200, d, false)
		}
		s := w.Summarize(t0, 1)
		got := s.Percentile(0.9)
		// Within an eighth above, or a microsecond (the resolution).
		if diff := float64(got-d) / float64(d); (got-d).Abs() > time.Microsecond && (diff < -0.01 || diff > 0.13) {
			t.Errorf("p90 of all %s: %s", d, got)
		}
	}
}

func TestConfigOfAppliesDefaults(t *testing.T) {
	c := ConfigOf(&v1alpha1.TrafficBreaker{RampSeconds: 6, Trip: &v1alpha1.TrafficBreakerTrip{LatencyMilliseconds: ptr.To[int32](5)}})
	if c.Ramp != 6*time.Second || c.Trip.ForSeconds != 10 || c.Trip.MinRequestsPerSecond != 5 || c.Trip.OpenFor != 30*time.Second || c.Trip.Latency != 5*time.Millisecond {
		t.Errorf("ConfigOf: %+v %+v", c, *c.Trip)
	}
}

func TestSetForgetsBreakersOfGonePolicies(t *testing.T) {
	s := NewSet()
	if d, ts := s.Admit("web", Config{Open: true}, t0, 0); d.Admitted || len(ts) != 2 || ts[0].To != Closed || ts[1].To != Open || ts[1].Policy != "web" {
		t.Fatalf("first request to an open breaker: %+v %+v", d, ts)
	}
	s.Tick(nil, at(1))
	if _, ok := s.Snapshot("web"); ok {
		t.Fatal("a breaker outlived its policy")
	}
}

func BenchmarkWindowRecord(b *testing.B) {
	w := &Window{}
	now := time.Now()
	for i := 0; b.Loop(); i++ {
		w.Record(now.Add(time.Duration(i)*time.Microsecond), 200, time.Duration(i%5000)*time.Microsecond, false)
	}
}

func BenchmarkWindowRecordParallel(b *testing.B) {
	w := &Window{}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			w.Record(time.Now(), 200, time.Duration(i%5000)*time.Microsecond, false)
			i++
		}
	})
}

func BenchmarkSummarize10s(b *testing.B) {
	w := &Window{}
	for i := range 10000 {
		w.Record(at(float64(i%10)), 200, time.Duration(i)*time.Microsecond, false)
	}
	for b.Loop() {
		s := w.Summarize(at(9), 10)
		_ = s.Percentile(0.9)
	}
}

// BenchmarkSetAdmit is what a request of a policy with a breaker pays.
func BenchmarkSetAdmit(b *testing.B) {
	s := NewSet()
	cfg := Config{Ramp: 30 * time.Second}
	now := time.Now()
	for b.Loop() {
		s.Admit("web", cfg, now, 0.5)
	}
}
