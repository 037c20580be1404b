package changewindow

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func at(t *testing.T, zone, wall string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", wall, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func compile(t *testing.T, spec v1alpha1.ChangeWindowSpec) *Window {
	t.Helper()
	w, err := Compile(spec, utc(t, "2026-01-01T00:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestOpenAcrossTimeZonesAndDaylightSaving(t *testing.T) {
	weekdayNights := v1alpha1.Schedule{Days: []v1alpha1.Weekday{"Mon", "Tue", "Wed", "Thu", "Fri"}, Start: "02:00", End: "04:00"}
	tests := []struct {
		name string
		spec v1alpha1.ChangeWindowSpec
		now  time.Time
		open bool
	}{
		// Asia/Shanghai, UTC+8, no daylight saving.
		{"Shanghai: Monday 03:00 is inside 02:00-04:00", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai", Schedules: []v1alpha1.Schedule{weekdayNights}},
			at(t, "Asia/Shanghai", "2026-11-23 03:00"), true},
		{"Shanghai: the end is exclusive", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai", Schedules: []v1alpha1.Schedule{weekdayNights}},
			at(t, "Asia/Shanghai", "2026-11-23 04:00"), false},
		{"Shanghai: Saturday is not a weekday", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai", Schedules: []v1alpha1.Schedule{weekdayNights}},
			at(t, "Asia/Shanghai", "2026-11-21 03:00"), false},
		{"Shanghai: the same instant in UTC is Sunday 19:00 and still inside", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai", Schedules: []v1alpha1.Schedule{weekdayNights}},
			utc(t, "2026-11-22T19:00:00Z"), true},
		// A window past midnight belongs to the day it starts.
		{"Berlin: Saturday 22:00-02:00 is open at Sunday 01:00", v1alpha1.ChangeWindowSpec{TimeZone: "Europe/Berlin",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sat"}, Start: "22:00", End: "02:00"}}},
			at(t, "Europe/Berlin", "2026-11-22 01:00"), true},
		{"Berlin: ... and closed at Monday 01:00", v1alpha1.ChangeWindowSpec{TimeZone: "Europe/Berlin",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sat"}, Start: "22:00", End: "02:00"}}},
			at(t, "Europe/Berlin", "2026-11-23 01:00"), false},
		// New York springs forward on 2026-03-08: 02:00 EST becomes 03:00 EDT.
		{"New York spring forward: 02:30-03:30 opens when clocks jump to 03:00", v1alpha1.ChangeWindowSpec{TimeZone: "America/New_York",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sun"}, Start: "02:30", End: "03:30"}}},
			utc(t, "2026-03-08T07:10:00Z"), true}, // 03:10 EDT
		{"New York spring forward: ... and closes at 03:30 EDT", v1alpha1.ChangeWindowSpec{TimeZone: "America/New_York",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sun"}, Start: "02:30", End: "03:30"}}},
			utc(t, "2026-03-08T07:30:00Z"), false},
		// New York falls back on 2026-11-01: 01:00-02:00 happens twice.
		{"New York fall back: 01:30-02:30 is open during the repeated hour", v1alpha1.ChangeWindowSpec{TimeZone: "America/New_York",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sun"}, Start: "01:30", End: "02:30"}}},
			utc(t, "2026-11-01T06:15:00Z"), true}, // the second 01:15, EST
		{"New York fall back: it opened at the first 01:30 (EDT)", v1alpha1.ChangeWindowSpec{TimeZone: "America/New_York",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sun"}, Start: "01:30", End: "02:30"}}},
			utc(t, "2026-11-01T05:35:00Z"), true}, // 01:35 EDT
		// Lord Howe Island shifts by half an hour: 02:00 -> 02:30 on 2026-10-04.
		{"Lord Howe half-hour shift: 02:00-02:20 does not exist and never opens", v1alpha1.ChangeWindowSpec{TimeZone: "Australia/Lord_Howe",
			Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sun"}, Start: "02:00", End: "02:20"}}},
			utc(t, "2026-10-03T15:30:00Z"), false}, // 02:30 LHDT
		// Cron in the window's zone.
		{"cron: 0 22 * * * for 3h in Tokyo is open at 00:30 local", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Tokyo",
			Schedules: []v1alpha1.Schedule{{Cron: "0 22 * * *", Duration: "3h"}}},
			at(t, "Asia/Tokyo", "2026-06-02 00:30"), true},
		{"cron: ... and closed at 01:00 local", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Tokyo",
			Schedules: []v1alpha1.Schedule{{Cron: "0 22 * * *", Duration: "3h"}}},
			at(t, "Asia/Tokyo", "2026-06-02 01:00"), false},
		// A freeze closes even the regular windows.
		{"freeze: a holiday freeze closes a weekday window", v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai", Schedules: []v1alpha1.Schedule{weekdayNights},
			Freezes: []v1alpha1.Freeze{{Start: metav1.NewTime(utc(t, "2026-12-24T00:00:00Z")), End: metav1.NewTime(utc(t, "2027-01-02T00:00:00Z")), Reason: "year-end freeze"}}},
			at(t, "Asia/Shanghai", "2026-12-28 03:00"), false},
		{"no schedules: open outside freezes", v1alpha1.ChangeWindowSpec{
			Freezes: []v1alpha1.Freeze{{Start: metav1.NewTime(utc(t, "2026-12-24T00:00:00Z")), End: metav1.NewTime(utc(t, "2027-01-02T00:00:00Z"))}}},
			utc(t, "2026-12-23T12:00:00Z"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := compile(t, tt.spec).Open(tt.now); got != tt.open {
				t.Fatalf("Open(%s) = %v, want %v", tt.now.Format(time.RFC3339), got, tt.open)
			}
		})
	}
}

func TestNextTransitions(t *testing.T) {
	w := compile(t, v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai",
		Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Mon", "Tue", "Wed", "Thu", "Fri"}, Start: "02:00", End: "04:00"}}})
	open, close := w.Next(at(t, "Asia/Shanghai", "2026-11-20 10:00")) // Friday
	if open == nil || !open.Equal(at(t, "Asia/Shanghai", "2026-11-23 02:00")) {
		t.Errorf("next open from Friday 10:00 = %v, want Monday 02:00", open)
	}
	if close == nil || !close.Equal(at(t, "Asia/Shanghai", "2026-11-23 04:00")) {
		t.Errorf("next close = %v, want Monday 04:00", close)
	}
	// Across the spring-forward night in New York, the opening is the jump.
	ny := compile(t, v1alpha1.ChangeWindowSpec{TimeZone: "America/New_York",
		Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Sun"}, Start: "02:30", End: "03:30"}}})
	open, _ = ny.Next(utc(t, "2026-03-07T12:00:00Z"))
	if open == nil || !open.Equal(utc(t, "2026-03-08T07:00:00Z")) {
		t.Errorf("next open before spring forward = %v, want 03:00 EDT (07:00Z)", open)
	}
}

func TestCompileRejectsImpossibleWindows(t *testing.T) {
	now := utc(t, "2026-01-01T00:00:00Z")
	for name, spec := range map[string]v1alpha1.ChangeWindowSpec{
		"unknown zone":          {TimeZone: "Mars/Olympus_Mons"},
		"30 February never":     {Schedules: []v1alpha1.Schedule{{Cron: "0 0 30 2 *", Duration: "1h"}}},
		"malformed cron":        {Schedules: []v1alpha1.Schedule{{Cron: "every day", Duration: "1h"}}},
		"no duration":           {Schedules: []v1alpha1.Schedule{{Cron: "0 2 * * *"}}},
		"bad time":              {Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Mon"}, Start: "25:00", End: "04:00"}}},
		"neither days nor cron": {Schedules: []v1alpha1.Schedule{{}}},
	} {
		if _, err := Compile(spec, now); err == nil {
			t.Errorf("%s: Compile accepted it", name)
		}
	}
}
