// Package backup runs the Backup objects on the leader: each one's
// backups when its schedule says (one at once without a schedule),
// through internal/operations/backup, into the manager's store; prunes its old ones;
// and reports in its status, Events and metrics, a failed or late run
// included.
package backup

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Decision is what a Backup asks for now.
type Decision struct {
	// Run says a backup is due now.
	Run bool
	// DueAt is when the run now due was due: the latest schedule time
	// passed (the object's creation without a schedule).
	DueAt time.Time
	// Missed counts the schedule times passed without a run besides
	// DueAt (the manager was down, or a run outlasted the period).
	Missed int
	// Next is when the run after this one is due; zero without a
	// schedule or when suspended.
	Next time.Time
}

// maxMissed bounds the look for the latest schedule time passed (an
// @every 1s schedule after a day down).
const maxMissed = 100000

// Decide is the pure schedule decision for b at now.
func Decide(b *v1alpha1.Backup, now time.Time) (Decision, error) {
	if err := Validate(&b.Spec); err != nil {
		return Decision{}, err
	}
	if b.Spec.Schedule == "" {
		if b.Status.LastRun != nil {
			return Decision{}, nil
		}
		return Decision{Run: true, DueAt: b.CreationTimestamp.Time}, nil
	}
	sched, _ := cron.ParseStandard(b.Spec.Schedule) // checked by Validate
	if b.Spec.Suspend {
		return Decision{}, nil
	}
	from := b.CreationTimestamp.Time
	if b.Status.LastScheduleTime != nil {
		from = b.Status.LastScheduleTime.Time
	}
	due := sched.Next(from)
	if due.IsZero() {
		return Decision{}, nil
	}
	if due.After(now) {
		return Decision{Next: due}, nil
	}
	d := Decision{Run: true, DueAt: due}
	for next := sched.Next(due); !next.IsZero() && !next.After(now) && d.Missed < maxMissed; next = sched.Next(next) {
		d.DueAt = next
		d.Missed++
	}
	d.Next = sched.Next(d.DueAt)
	return d, nil
}

// Validate checks what the CRD's schema cannot: the cron expression, the
// label selector and the retention parse.
func Validate(spec *v1alpha1.BackupSpec) error {
	if spec.Schedule != "" {
		if _, err := cron.ParseStandard(spec.Schedule); err != nil {
			return fmt.Errorf("schedule %q: %v; give five fields (minute hour day-of-month month day-of-week) or @daily, @every 6h", spec.Schedule, err)
		}
	}
	if _, err := labels.Parse(spec.LabelSelector); err != nil {
		return fmt.Errorf("labelSelector %q: %v", spec.LabelSelector, err)
	}
	if spec.Retention != "" {
		if _, err := time.ParseDuration(spec.Retention); err != nil {
			return fmt.Errorf("retention %q: %v; give a duration such as 720h", spec.Retention, err)
		}
	}
	return nil
}

// Prune says which of a Backup's backups (oldest first, with their start
// times) go: beyond the newest keepLast, and older than retention (when
// not zero) but never the newest.
func Prune(names []string, started []time.Time, keepLast int, retention time.Duration, now time.Time) (keep, drop []string) {
	for i, n := range names {
		newest := i == len(names)-1
		switch {
		case newest:
			keep = append(keep, n)
		case len(names)-i > keepLast:
			drop = append(drop, n)
		case retention > 0 && now.Sub(started[i]) > retention:
			drop = append(drop, n)
		default:
			keep = append(keep, n)
		}
	}
	return keep, drop
}
