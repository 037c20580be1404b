package breaker

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"close by hand ends a trip; only distress after it trips again", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{20, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(19)}, true, Ramping, "closed by hand (spec.breaker.closedAt) after it tripped: 5xx"},
			{21, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(19)}, true, Ramping, ""},
			{25.9, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(19)}, true, Ramping, ""},
			{26, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(19)}, true, Open, "5xx"},
			{55, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(19)}, true, Open, "5xx"},
		}},
		{"a close by hand is acted on by this gateway's clock, even one dated later", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip}, true, Open, "5xx"},
			{6, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(60)}, true, Ramping, "closed by hand"},
			{16, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(60)}, false, Closed, "ramp done"},
		}},
		{"close by hand of a closed breaker forgets the distress so far", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, true, Closed, ""},
			{4, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(3)}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(3)}, true, Closed, ""},
			{9.9, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(3)}, true, Closed, ""},
			{10, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(3)}, true, Open, "5xx"},
		}},
		{"a close from before the breaker began is no new close", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(-100)}, true, Closed, ""},
			{5, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(-100)}, true, Open, "5xx"},
			{6, Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(-100)}, true, Open, "5xx"},
		}},
		{"open by hand is not ended by a close dated with it", []step{
			{0, Config{Ramp: 10 * time.Second, Trip: trip}, false, Closed, ""},
			{1, Config{Open: true, Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(1)}, true, Open, "by hand"},
			{100, Config{Open: true, Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(1)}, true, Open, "by hand"},
		}},
		{"no trip: distress is ignored", []step{
			{5, Config{Ramp: 10 * time.Second}, true, Closed, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.steps[0].cfg, t0)
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
	b := New(Config{}, t0)
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
	b := New(Config{}, t0)
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
	tripped := New(Config{}, t0)
	cfg.Trip = &Trip{OpenFor: 30 * time.Second}
	tripped.Advance(cfg, true, true, "tripped: p90 latency of short requests 12ms > latencyMilliseconds 5", at(0))
	if tripped.State != Open {
		t.Fatalf("tripped breaker %s", tripped.State)
	}
	msg, wait = tripped.Refusal("web", cfg, at(10))
	if !strings.Contains(msg, "p90 latency of short requests 12ms") || !strings.Contains(msg, "2026-03-01T12:00:30Z") || wait != 20*time.Second {
		t.Errorf("tripped refusal %q, wait %s: want the threshold, its value and when it ramps back (in 20s)", msg, wait)
	}
	if !strings.Contains(msg, "an operator ends it now with: rampart gateway breaker close --policy web") {
		t.Errorf("tripped refusal %q does not say how an operator ends the trip", msg)
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
			reason, distressed := Decide(trip, &s)
			if distressed != (tc.want != "") || !strings.Contains(reason, tc.want) {
				t.Errorf("Decide: %v %q, want %q", distressed, reason, tc.want)
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
	if d, ts := s.Decide("web", Config{Open: true}, t0, 0); d.Allowed || len(ts) != 2 || ts[0].To != Closed || ts[1].To != Open || ts[1].Policy != "web" {
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

// BenchmarkSetDecide is what a request of a policy with a breaker pays.
func BenchmarkSetDecide(b *testing.B) {
	s := NewSet()
	cfg := Config{Ramp: 30 * time.Second}
	now := time.Now()
	for b.Loop() {
		s.Decide("web", cfg, now, 0.5)
	}
}

// A restarted gateway goes on from the entry of status.breakers it wrote.
func TestResume(t *testing.T) {
	trip := &Trip{ErrorPercent: 50, ForSeconds: 5, MinRequestsPerSecond: 5, OpenFor: 30 * time.Second}
	tripped := "tripped: 5xx answers 60% >= errorPercent 50"
	entry := func(state v1alpha1.BreakerState, reason string, since float64) v1alpha1.GatewayBreakerStatus {
		return v1alpha1.GatewayBreakerStatus{Gateway: "gw-0", State: state, Reason: reason, Since: metav1.NewTime(at(since))}
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		entry  v1alpha1.GatewayBreakerStatus
		now    float64
		want   v1alpha1.BreakerState
		since  float64
		reason string
		// then, later: the state at a later time
		later     float64
		wantLater v1alpha1.BreakerState
	}{
		{"tripped: open for the rest of openSeconds, then ramps", Config{Ramp: 10 * time.Second, Trip: trip}, entry(Open, tripped, 0), 12,
			Open, 0, "5xx", 30, Ramping},
		{"tripped longer ago than openSeconds: ramps from the restart", Config{Ramp: 10 * time.Second, Trip: trip}, entry(Open, tripped, 0), 100,
			Ramping, 100, "openSeconds", 110, Closed},
		{"tripped, then closed by hand while down: ramps from the close", Config{Ramp: 10 * time.Second, Trip: trip, ClosedAt: at(8)}, entry(Open, tripped, 0), 12,
			Ramping, 8, "closed by hand while this gateway was down", 18, Closed},
		{"tripped, and trip removed: ramps", Config{Ramp: 10 * time.Second}, entry(Open, tripped, 0), 12,
			Ramping, 12, "openSeconds", 22, Closed},
		{"ramping: goes on where it was", Config{Ramp: 10 * time.Second, Trip: trip}, entry(Ramping, "closed by hand: letting traffic back over 10s", 5), 8,
			Ramping, 5, "closed by hand", 15, Closed},
		{"opened by hand and still open in spec: open", Config{Open: true, Ramp: 10 * time.Second}, entry(Open, "opened by hand (spec.breaker.open is true)", 0), 12,
			Open, 12, "opened by hand", 1000, Open},
		{"opened by hand, closed while down without closedAt: closed", Config{Ramp: 10 * time.Second}, entry(Open, "opened by hand (spec.breaker.open is true)", 0), 12,
			Closed, 12, "", 13, Closed},
		{"closed: closed", Config{Ramp: 10 * time.Second, Trip: trip}, entry(Closed, "ramp done", 0), 12,
			Closed, 12, "", 13, Closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSet()
			ts := s.Resume("web", tc.cfg, tc.entry, at(tc.now))
			b, _ := s.Snapshot("web")
			if b.State != tc.want || !b.Since.Equal(at(tc.since)) || !strings.Contains(b.Reason, tc.reason) {
				t.Fatalf("resumed %s since %s %q, want %s since %s with %q", b.State, b.Since, b.Reason, tc.want, at(tc.since), tc.reason)
			}
			if len(ts) == 0 || ts[0].From != "" || ts[0].Policy != "web" {
				t.Errorf("transitions %+v: want the resumed state first, for status", ts)
			}
			if ts[len(ts)-1].To != tc.want {
				t.Errorf("last transition %+v, want to %s", ts[len(ts)-1], tc.want)
			}
			s.Tick([]Configured{{"web", tc.cfg}}, at(tc.later))
			if b, _ := s.Snapshot("web"); b.State != tc.wantLater {
				t.Errorf("at %gs: %s (%s), want %s", tc.later, b.State, b.Reason, tc.wantLater)
			}
		})
	}
	// A breaker the gateway has already made is not replaced.
	s := NewSet()
	s.Decide("web", Config{Open: true}, at(0), 0)
	if ts := s.Resume("web", Config{}, entry(Closed, "", 0), at(1)); ts != nil {
		t.Errorf("Resume over a live breaker: %+v", ts)
	}
}

// After an operator's close, the distress judged before it does not
// count: the breaker trips again only on forSeconds of distress judged
// after it, though the window still holds the 503s from before.
func TestSetJudgesOnlyAnswersAfterAClose(t *testing.T) {
	cfg := Config{Ramp: 10 * time.Second, Trip: &Trip{ErrorPercent: 50, ForSeconds: 5, MinRequestsPerSecond: 5, OpenFor: 300 * time.Second}}
	s := NewSet()
	state := func() v1alpha1.BreakerState { b, _ := s.Snapshot("web"); return b.State }
	failing := func(from, to float64) {
		for sec := from; sec <= to; sec += 0.5 {
			for range 10 {
				s.Window.Record(at(sec), 503, time.Millisecond, false)
			}
			s.Tick([]Configured{{"web", cfg}}, at(sec))
		}
	}
	failing(0, 6)
	if state() != Open {
		t.Fatalf("6s of 503s: %s, want Open", state())
	}
	closed := cfg
	closed.ClosedAt = at(6.2)
	for sec := 6.5; sec < 17; sec += 0.5 {
		s.Tick([]Configured{{"web", closed}}, at(sec))
		if sec < 16.5 && state() != Ramping {
			t.Fatalf("%gs, after the close at 6.5s with the last 5s of answers all 503: %s, want Ramping", sec, state())
		}
	}
	if state() != Closed {
		t.Fatalf("after the ramp: %s", state())
	}
	cfg = closed
	failing(17, 21.5)
	if state() != Closed {
		t.Fatalf("4.5s of fresh 503s: %s, want Closed (forSeconds is 5)", state())
	}
	failing(22, 23)
	if state() != Open {
		t.Fatalf("6s of fresh 503s: %s, want Open", state())
	}
}
