// Package changewindow decides whether a change to guarded fields may go
// through now: a ChangeWindow's recurring schedules (weekdays with a
// wall-clock start and end, or cron activations with a duration) in an IANA
// time zone, minus its dated freezes. Everything is a pure function of the
// spec and a clock passed in.
package changewindow

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	// Zone data in the binary: a minimal host may have no /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Window is a compiled ChangeWindow schedule.
type Window struct {
	Location  *time.Location
	schedules []schedule
	freezes   []v1alpha1.Freeze
}

type schedule struct {
	// days windows: weekdays and wall-clock minutes from midnight.
	days       []time.Weekday
	start, end int
	// cron windows.
	cron     cron.Schedule
	duration time.Duration
}

var weekdays = map[v1alpha1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// Horizon bounds how far ahead Next looks for a transition.
const Horizon = 30 * 24 * time.Hour

// Compile checks and compiles a window's schedule. It rejects unknown time
// zones, malformed times and cron expressions, and cron schedules that
// never fire (such as 30 February).
func Compile(spec v1alpha1.ChangeWindowSpec, now time.Time) (*Window, error) {
	zone := spec.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", zone)
	}
	w := &Window{Location: loc, freezes: spec.Freezes}
	for i, s := range spec.Schedules {
		var c schedule
		switch {
		case len(s.Days) > 0:
			for _, d := range s.Days {
				wd, ok := weekdays[d]
				if !ok {
					return nil, fmt.Errorf("schedules[%d]: unknown day %q", i, d)
				}
				c.days = append(c.days, wd)
			}
			if c.start, err = minutes(s.Start); err != nil {
				return nil, fmt.Errorf("schedules[%d].start: %w", i, err)
			}
			if c.end, err = minutes(s.End); err != nil {
				return nil, fmt.Errorf("schedules[%d].end: %w", i, err)
			}
		case s.Cron != "":
			if c.cron, err = cron.ParseStandard(s.Cron); err != nil {
				return nil, fmt.Errorf("schedules[%d].cron %q: %w", i, s.Cron, err)
			}
			if c.duration, err = time.ParseDuration(s.Duration); err != nil || c.duration < time.Minute || c.duration > 168*time.Hour {
				return nil, fmt.Errorf("schedules[%d].duration %q: want a duration between 1m and 168h such as 2h", i, s.Duration)
			}
			// A schedule that never fires (30 February) would keep the
			// window closed for ever: a mistake to refuse, not to obey.
			if next := c.cron.Next(now.In(loc)); next.IsZero() || next.Sub(now) > 366*24*time.Hour {
				return nil, fmt.Errorf("schedules[%d].cron %q never fires", i, s.Cron)
			}
		default:
			return nil, fmt.Errorf("schedules[%d]: set days with start and end, or cron with duration", i)
		}
		w.schedules = append(w.schedules, c)
	}
	return w, nil
}

func minutes(hhmm string) (int, error) {
	h, m, ok := strings.Cut(hhmm, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q is not HH:MM", hhmm)
	}
	return hh*60 + mm, nil
}

// Open says whether guarded fields may change at now, and if a freeze
// closes the window, which.
func (w *Window) Open(now time.Time) (bool, *v1alpha1.Freeze) {
	for i, f := range w.freezes {
		if !now.Before(f.Start.Time) && now.Before(f.End.Time) {
			return false, &w.freezes[i]
		}
	}
	if len(w.schedules) == 0 {
		return true, nil
	}
	for _, s := range w.schedules {
		if s.open(now.In(w.Location)) {
			return true, nil
		}
	}
	return false, nil
}

func (s schedule) open(now time.Time) bool {
	if s.cron != nil {
		// Open iff some activation lies in (now-duration, now]: the next
		// activation after now-duration is not after now.
		t := s.cron.Next(now.Add(-s.duration))
		return !t.IsZero() && !t.After(now)
	}
	// A window that starts on day D may still run on D+1 (past midnight).
	for _, back := range []int{0, -1} {
		y, m, d := now.Date()
		day := time.Date(y, m, d+back, 0, 0, 0, 0, now.Location())
		if !slices.Contains(s.days, day.Weekday()) {
			continue
		}
		start, end := s.bounds(day)
		if !now.Before(start) && now.Before(end) {
			return true
		}
	}
	return false
}

// bounds are the instants a day window starts and ends on the local day
// that begins at day.
func (s schedule) bounds(day time.Time) (time.Time, time.Time) {
	y, m, d := day.Date()
	start := atWall(y, m, d, s.start, day.Location())
	endDay := d
	if s.end <= s.start {
		endDay++
	}
	return start, atWall(y, m, endDay, s.end, day.Location())
}

// atWall is the first instant whose local wall clock reads at least
// minutes past midnight of day d. On the day clocks spring forward, a time
// in the skipped hour (02:30 in New York) becomes the moment clocks jump
// (03:00 EDT); time.Date alone would move it by the offset, either way. On
// the day clocks fall back, a repeated time is its first occurrence.
func atWall(y int, m time.Month, d, minutes int, loc *time.Location) time.Time {
	target := wallKey(time.Date(y, m, d, 0, 0, 0, 0, time.UTC)) + minutes
	t := time.Date(y, m, d, minutes/60, minutes%60, 0, 0, loc)
	for wallKey(t) < target {
		t = t.Add(time.Minute)
	}
	for wallKey(t.Add(-time.Minute)) >= target {
		t = t.Add(-time.Minute)
	}
	return t
}

// wallKey orders instants by their local wall clock, in minutes.
func wallKey(t time.Time) int {
	y, m, d := t.Date()
	days := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
	return int(days)*1440 + t.Hour()*60 + t.Minute()
}

// Next finds the next opening and closing after now within Horizon; nil
// where there is none. The closing is also nil when the schedules are too
// dense to follow (see closeBudget): a status, not a decision, rests on it.
func (w *Window) Next(now time.Time) (nextOpen, nextClose *time.Time) {
	until := now.Add(Horizon)
	if open, _ := w.Open(now); open {
		c, ok, _ := w.nextClosing(now, until)
		if !ok {
			return nil, nil
		}
		o, ok := w.nextOpening(c, until)
		return ptr(o, ok), &c
	}
	o, ok := w.nextOpening(now, until)
	if !ok {
		return nil, nil
	}
	c, ok, _ := w.nextClosing(o, until)
	return &o, ptr(c, ok)
}

// NextOpen is the first instant after now, within Horizon, when the
// window is open; nil if none. A denial names it, so it costs at most a
// few cron steps per schedule and freeze, whatever the schedules.
func (w *Window) NextOpen(now time.Time) *time.Time {
	return ptr(w.nextOpening(now, now.Add(Horizon)))
}

func ptr(t time.Time, ok bool) *time.Time {
	if !ok {
		return nil
	}
	return &t
}

// nextOpening is the first instant after from, not after until, when the
// window is open. The window can only open where a schedule starts or a
// freeze ends, so it tries the earliest such instant; one inside a freeze
// jumps to that freeze's end, so the loop runs at most about twice per
// freeze plus once per empty schedule occurrence (a wall-clock window
// skipped by daylight saving).
func (w *Window) nextOpening(from, until time.Time) (time.Time, bool) {
	x := from.In(w.Location)
	c, ok := w.nextCandidate(x)
	for ok && !c.After(until) {
		open, freeze := w.Open(c)
		switch {
		case open:
			return c, true
		case freeze != nil:
			c = freeze.End.In(w.Location)
		default:
			c, ok = w.nextCandidate(c)
		}
	}
	return time.Time{}, false
}

// nextCandidate is the earliest schedule start or freeze end after x.
func (w *Window) nextCandidate(x time.Time) (time.Time, bool) {
	var best time.Time
	found := false
	consider := func(t time.Time) {
		if !t.IsZero() && t.After(x) && (!found || t.Before(best)) {
			best, found = t, true
		}
	}
	for _, f := range w.freezes {
		consider(f.End.Time.In(w.Location))
	}
	for _, s := range w.schedules {
		consider(s.nextStart(x))
	}
	return best, found
}

// nextStart is the first start of one of the schedule's windows after x
// (x in the window's location); zero if none within Horizon.
func (s schedule) nextStart(x time.Time) time.Time {
	if s.cron != nil {
		return s.cron.Next(x)
	}
	y, m, d := x.Date()
	for back := -1; back <= int(Horizon/(24*time.Hour))+1; back++ {
		day := time.Date(y, m, d+back, 0, 0, 0, 0, x.Location())
		if !slices.Contains(s.days, day.Weekday()) {
			continue
		}
		if start, _ := s.bounds(day); start.After(x) {
			return start
		}
	}
	return time.Time{}
}

// closeBudget bounds the schedule steps nextClosing may take, each a
// handful of cron steps (about 10ms in all): a window kept open by
// one-minute windows every minute is followed a minute per step, and 30
// days are 43,200 minutes.
const closeBudget = 4096

// nextClosing is the first instant after from (when the window is open),
// not after until, when it is closed: the next freeze start, or the end of
// the schedules' merged coverage, whichever is first. It follows one
// schedule while its windows overlap and looks at the others only where
// that run ends; false if there is none, and also exhausted if the budget
// ran out first.
func (w *Window) nextClosing(from, until time.Time) (t time.Time, ok, exhausted bool) {
	limit, frozen := until, false
	for _, f := range w.freezes {
		if f.Start.After(from) && !f.Start.After(limit) {
			limit, frozen = f.Start.Time, true
		}
	}
	if len(w.schedules) == 0 {
		return limit, frozen, false
	}
	x := from.In(w.Location)
	var follow *schedule // the schedule whose windows keep x covered
	for budget := closeBudget; budget > 0; budget-- {
		if follow != nil {
			if e, ok := follow.coverEnd(x); ok {
				if x = e; x.After(limit) {
					return limit, frozen, false
				}
				continue
			}
		}
		// Switch to the schedule covering x the furthest.
		best, covered := x, false
		for i := range w.schedules {
			budget--
			if e, ok := w.schedules[i].coverEnd(x); ok && e.After(best) {
				best, covered, follow = e, true, &w.schedules[i]
			}
		}
		if !covered {
			return x, true, false // nothing covers x: the window closes here
		}
		if x = best; x.After(limit) {
			return limit, frozen, false
		}
	}
	return time.Time{}, false, true
}

// coverEnd is the end of the latest-ending window of this schedule that
// contains x (x in the window's location): how far the schedule alone
// keeps the window open from x. False if none contains x.
func (s schedule) coverEnd(x time.Time) (time.Time, bool) {
	if s.cron == nil {
		var end time.Time
		y, m, d := x.Date()
		for _, back := range []int{0, -1} {
			day := time.Date(y, m, d+back, 0, 0, 0, 0, x.Location())
			if !slices.Contains(s.days, day.Weekday()) {
				continue
			}
			if start, e := s.bounds(day); !x.Before(start) && x.Before(e) && e.After(end) {
				end = e
			}
		}
		return end, !end.IsZero()
	}
	last, ok := s.lastFiring(x)
	return last.Add(s.duration), ok
}

// lastFiring is the latest cron activation in (x-duration, x]. cron has
// no "previous", so it bisects: Next(y) > x holds exactly for y at or
// after that activation, and activations are whole minutes, so a minute
// grid finds it in log2(duration/1m) steps.
func (s schedule) lastFiring(x time.Time) (time.Time, bool) {
	lo := x.Add(-s.duration)
	if first := s.cron.Next(lo); first.IsZero() || first.After(x) {
		return time.Time{}, false
	}
	steps := int(s.duration/time.Minute) + 1
	k := sort.Search(steps+1, func(k int) bool {
		return s.cron.Next(lo.Add(time.Duration(k) * time.Minute)).After(x)
	})
	// The activation lies in (lo+(k-1)m, lo+km]; step to the last one ≤ x.
	last := s.cron.Next(lo.Add(time.Duration(k-1) * time.Minute))
	for n := s.cron.Next(last); !n.IsZero() && !n.After(x); n = s.cron.Next(last) {
		last = n
	}
	return last, true
}
