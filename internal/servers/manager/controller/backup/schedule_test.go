package backup

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	created := time.Date(2026, 11, 25, 10, 0, 30, 0, time.UTC)
	at := func(hhmm string) *metav1.Time {
		ts, err := time.Parse("2006-01-02 15:04", "2026-11-25 "+hhmm)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Time{Time: ts}
	}
	for _, tt := range []struct {
		name     string
		spec     v1alpha1.BackupSpec
		status   v1alpha1.BackupStatus
		now      *metav1.Time
		run      bool
		due      *metav1.Time
		missed   int
		next     *metav1.Time
		errorHas string
	}{
		{name: "no schedule: one run at once", now: at("10:01"), run: true, due: &metav1.Time{Time: created}},
		{name: "no schedule, run made", status: v1alpha1.BackupStatus{LastRun: &v1alpha1.BackupRun{Name: "x"}}, now: at("10:01")},
		{name: "hourly, not due yet", spec: v1alpha1.BackupSpec{Schedule: "0 * * * *"}, now: at("10:30"), next: at("11:00")},
		{name: "hourly, due", spec: v1alpha1.BackupSpec{Schedule: "0 * * * *"}, now: at("11:00"), run: true, due: at("11:00"), next: at("12:00")},
		{name: "hourly, manager down 3h", spec: v1alpha1.BackupSpec{Schedule: "@hourly"}, status: v1alpha1.BackupStatus{LastScheduleTime: at("11:00")},
			now: at("14:20"), run: true, due: at("14:00"), missed: 2, next: at("15:00")},
		{name: "suspended", spec: v1alpha1.BackupSpec{Schedule: "@hourly", Suspend: true}, now: at("14:20")},
		{name: "every 15m", spec: v1alpha1.BackupSpec{Schedule: "@every 15m"}, status: v1alpha1.BackupStatus{LastScheduleTime: at("10:15")},
			now: at("10:31"), run: true, due: at("10:30"), next: at("10:45")},
		{name: "bad cron", spec: v1alpha1.BackupSpec{Schedule: "61 * * * *"}, now: at("10:31"), errorHas: "five fields"},
		{name: "bad selector", spec: v1alpha1.BackupSpec{LabelSelector: "a in ("}, now: at("10:31"), errorHas: "labelSelector"},
		{name: "bad retention", spec: v1alpha1.BackupSpec{Retention: "a week"}, now: at("10:31"), errorHas: "720h"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &v1alpha1.Backup{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: created}}, Spec: tt.spec, Status: tt.status}
			d, err := Decide(b, tt.now.Time)
			if tt.errorHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errorHas) {
					t.Fatalf("error %v, want one saying %q", err, tt.errorHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Decision{Run: tt.run, Missed: tt.missed}
			if tt.due != nil {
				want.DueAt = tt.due.Time
			}
			if tt.next != nil {
				want.Next = tt.next.Time
			}
			if d != want {
				t.Errorf("got %+v, want %+v", d, want)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	names := []string{"a", "b", "c", "d"}
	started := []time.Time{now.Add(-100 * time.Hour), now.Add(-50 * time.Hour), now.Add(-2 * time.Hour), now.Add(-time.Hour)}
	keep, drop := Prune(names, started, 3, 0, now)
	if !slices.Equal(keep, []string{"b", "c", "d"}) || !slices.Equal(drop, []string{"a"}) {
		t.Errorf("keepLast 3: keep %v drop %v", keep, drop)
	}
	keep, drop = Prune(names, started, 7, 24*time.Hour, now)
	if !slices.Equal(keep, []string{"c", "d"}) || !slices.Equal(drop, []string{"a", "b"}) {
		t.Errorf("retention 24h: keep %v drop %v", keep, drop)
	}
	keep, _ = Prune(names, started, 7, time.Minute, now)
	if !slices.Equal(keep, []string{"d"}) {
		t.Errorf("retention shorter than the newest's age: keep %v, want the newest", keep)
	}
}
