package changewindow

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// enumeratedNext is the former Next, kept as the reference: it lists every
// schedule start and end within Horizon and asks Open at each. Correct, but
// a cron that fires every minute yields 43,200 instants per schedule.
func (w *Window) enumeratedNext(now time.Time) (nextOpen, nextClose *time.Time) {
	until := now.Add(Horizon)
	var out []time.Time
	add := func(t time.Time) {
		if t.After(now) && !t.After(until) {
			out = append(out, t)
		}
	}
	for _, f := range w.freezes {
		add(f.Start.Time)
		add(f.End.Time)
	}
	local := now.In(w.Location)
	for _, s := range w.schedules {
		if s.cron != nil {
			for t := s.cron.Next(local.Add(-s.duration)); !t.IsZero() && !t.After(until); t = s.cron.Next(t) {
				add(t)
				add(t.Add(s.duration))
			}
			continue
		}
		y, m, d := local.Date()
		for back := -1; back <= int(Horizon/(24*time.Hour)); back++ {
			day := time.Date(y, m, d+back, 0, 0, 0, 0, w.Location)
			if slices.Contains(s.days, day.Weekday()) {
				start, end := s.bounds(day)
				add(start)
				add(end)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	out = slices.CompactFunc(out, func(a, b time.Time) bool { return a.Equal(b) })
	open, _ := w.Open(now)
	for _, t := range out {
		if o, _ := w.Open(t); o != open {
			tt := t
			if o {
				nextOpen = &tt
			} else {
				nextClose = &tt
			}
			open = o
			if nextOpen != nil && nextClose != nil {
				break
			}
		}
	}
	return nextOpen, nextClose
}

// randomSpec builds a window from a seed: a few day and cron schedules
// (dense, sparse, overlapping, past midnight) and freezes, in zones with
// and without daylight saving.
func randomSpec(r *rand.Rand, now time.Time) v1alpha1.ChangeWindowSpec {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Shanghai", "Australia/Lord_Howe"}
	crons := []string{"* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5", "15 */3 * * *", "0 0 1 * *", "45 23 * * 0", "0 2,14 * * 6"}
	durations := []string{"1m", "5m", "45m", "1h", "2h30m", "25h", "168h"}
	days := []v1alpha1.Weekday{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	hhmm := func() string { return fmt.Sprintf("%02d:%02d", r.IntN(24), []int{0, 15, 30, 59}[r.IntN(4)]) }
	spec := v1alpha1.ChangeWindowSpec{TimeZone: zones[r.IntN(len(zones))]}
	for range r.IntN(5) {
		if r.IntN(2) == 0 {
			spec.Schedules = append(spec.Schedules, v1alpha1.Schedule{Cron: crons[r.IntN(len(crons))], Duration: durations[r.IntN(len(durations))]})
			continue
		}
		var ds []v1alpha1.Weekday
		for _, d := range days {
			if r.IntN(2) == 0 {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			ds = days[:1]
		}
		spec.Schedules = append(spec.Schedules, v1alpha1.Schedule{Days: ds, Start: hhmm(), End: hhmm()})
	}
	for range r.IntN(4) {
		start := now.Add(time.Duration(r.IntN(40*24*60)-5*24*60) * time.Minute)
		end := start.Add(time.Duration(1+r.IntN(10*24*60)) * time.Minute)
		spec.Freezes = append(spec.Freezes, v1alpha1.Freeze{Start: metav1.NewTime(start), End: metav1.NewTime(end)})
	}
	return spec
}

func sameInstant(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

func show(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

// checkAgainstEnumeration fails when Next or NextOpen disagree with the
// reference for the window a seed builds.
// It says false when the closing was out of budget.
func checkAgainstEnumeration(t *testing.T, seed uint64) bool {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(400*24*60)) * time.Minute).Add(time.Duration(r.IntN(60)) * time.Second)
	spec := randomSpec(r, now)
	w, err := Compile(spec, now)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	wantOpen, wantClose := w.enumeratedNext(now)
	gotOpen, gotClose := w.Next(now)
	if w.closeExhausted(now) {
		// Too dense to follow: Next may leave out what it could not reach.
		if (gotOpen != nil && !sameInstant(gotOpen, wantOpen)) || (gotClose != nil && !sameInstant(gotClose, wantClose)) {
			t.Fatalf("seed %d: out of budget, Next = %s %s, want %s %s", seed, show(gotOpen), show(gotClose), show(wantOpen), show(wantClose))
		}
		return false
	}
	if !sameInstant(gotOpen, wantOpen) || !sameInstant(gotClose, wantClose) {
		t.Fatalf("seed %d, now %s, spec %+v:\nNext = open %s close %s\nwant   open %s close %s",
			seed, now.Format(time.RFC3339), spec, show(gotOpen), show(gotClose), show(wantOpen), show(wantClose))
	}
	if open, _ := w.Open(now); !open && !sameInstant(w.NextOpen(now), wantOpen) {
		t.Fatalf("seed %d: NextOpen = %s, want %s", seed, show(w.NextOpen(now)), show(wantOpen))
	}
	return true
}

// closeExhausted says whether Next ran out of budget looking for a closing.
func (w *Window) closeExhausted(now time.Time) bool {
	until := now.Add(Horizon)
	from := now
	if open, _ := w.Open(now); !open {
		o, ok := w.nextOpening(now, until)
		if !ok {
			return false
		}
		from = o
	}
	_, _, exhausted := w.nextClosing(from, until)
	return exhausted
}

// TestNextMatchesEnumeration compares the bounded Next with the reference
// on 300 generated windows.
func TestNextMatchesEnumeration(t *testing.T) {
	n := uint64(300)
	if testing.Short() {
		n = 100
	}
	followed := 0
	for seed := range n {
		if checkAgainstEnumeration(t, seed) {
			followed++
		}
	}
	// Out of budget only for windows kept open by one-minute windows every
	// minute for days, a few of the generated ones.
	if followed < int(n)*9/10 {
		t.Errorf("the closing was out of budget for %d of %d windows", int(n)-followed, n)
	}
	t.Logf("compared %d of %d windows in full", followed, n)
}

func FuzzNextMatchesEnumeration(f *testing.F) {
	for _, seed := range []uint64{1, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkAgainstEnumeration(t, seed) })
}

// adversarial are windows chosen to make the next opening or closing
// expensive: many dense cron schedules, a long freeze over them, schedules
// that take turns minute by minute.
func adversarial(now time.Time) map[string]v1alpha1.ChangeWindowSpec {
	every := func(cron, d string, n int) []v1alpha1.Schedule {
		out := make([]v1alpha1.Schedule, n)
		for i := range out {
			out[i] = v1alpha1.Schedule{Cron: cron, Duration: d}
		}
		return out
	}
	frozen := []v1alpha1.Freeze{{Start: metav1.NewTime(now.Add(-time.Hour)), End: metav1.NewTime(now.Add(29 * 24 * time.Hour))}}
	var turns []v1alpha1.Schedule
	for i := range 32 {
		turns = append(turns, v1alpha1.Schedule{Cron: fmt.Sprintf("%d-59/32 * * * *", i), Duration: "1m"})
	}
	return map[string]v1alpha1.ChangeWindowSpec{
		"32x every minute 1m, frozen 29 days":             {Schedules: every("* * * * *", "1m", 32), Freezes: frozen},
		"32x every minute 168h, frozen 29 days":           {Schedules: every("* * * * *", "168h", 32), Freezes: frozen},
		"32x every minute 1m, open":                       {Schedules: every("* * * * *", "1m", 32)},
		"32 schedules taking turns each minute":           {Schedules: turns},
		"32x every other minute 1m, closed half the time": {Schedules: every("*/2 * * * *", "1m", 32)},
	}
}

// BenchmarkNextOpening measures what one denial costs (NextOpen) and what
// the status costs (Next), against the former enumeration, for the worst
// windows the schema admits. Run: go test -run '^$' -bench NextOpening ./internal/protection/changewindow/
func BenchmarkNextOpening(b *testing.B) {
	now := time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC)
	for name, spec := range adversarial(now) {
		w, err := Compile(spec, now)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/enumerated", func(b *testing.B) {
			for b.Loop() {
				w.enumeratedNext(now)
			}
		})
		b.Run(name+"/NextOpen", func(b *testing.B) {
			for b.Loop() {
				w.NextOpen(now)
			}
		})
		b.Run(name+"/Next", func(b *testing.B) {
			for b.Loop() {
				w.Next(now)
			}
		})
	}
}
