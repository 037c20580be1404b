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
			if c.duration, err = time.ParseDuration(s.Duration); err != nil || c.duration <= 0 {
				return nil, fmt.Errorf("schedules[%d].duration %q: want a positive duration such as 2h", i, s.Duration)
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
// where there is none.
func (w *Window) Next(now time.Time) (nextOpen, nextClose *time.Time) {
	open, _ := w.Open(now)
	for _, t := range w.transitions(now) {
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

// transitions are the instants after now when the window may open or
// close, in order.
func (w *Window) transitions(now time.Time) []time.Time {
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
	return slices.CompactFunc(out, func(a, b time.Time) bool { return a.Equal(b) })
}
