// Package flowcontrol decides whether one more delete may go through under
// a DeletionFlowControl: sliding-window limits kept as slot counts, and a
// breaker that trips when a limit is reached. It is a pure function from
// (spec, status, clock) to (verdict, next status); the admission adapter
// stores the next status with optimistic concurrency, which is what makes
// the limit exact across replicas and durable across restarts.
package flowcontrol

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/ledger"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// slotsPerWindow is how finely each window is counted. Counting every slot
// that overlaps the window is conservative: no sliding window of the
// limit's length ever holds more admitted deletes than the limit, at the
// price of denying up to one slot (window/30) early.
const slotsPerWindow = 30

// maxRecent bounds status.recentDenied.
const maxRecent = 10

// Breaker states.
const (
	Closed = "Closed"
	Open   = "Open"
)

// Rule names.
const (
	RuleLimit   = "flow-control-limit"
	RuleBreaker = "flow-control-breaker"
)

// Tripped says whether this delete tripped the breaker (reached a limit).
func Tripped(v verdict.Verdict) bool { return v.Reason == RuleLimit }

// Limit is a parsed limit.
type Limit struct {
	Count  int32
	Window time.Duration
}

// Limits parses a spec's limits.
func Limits(spec v1alpha1.DeletionFlowControlSpec) ([]Limit, error) {
	out := make([]Limit, len(spec.Limits))
	for i, l := range spec.Limits {
		w, err := time.ParseDuration(l.Window)
		if err != nil || w < 10*time.Second {
			return nil, fmt.Errorf("limits[%d].window %q: want a duration of 10s or more", i, l.Window)
		}
		out[i] = Limit{Count: l.Count, Window: w}
	}
	return out, nil
}

func (l Limit) width() int64 { return max(int64(l.Window/time.Second)/slotsPerWindow, 1) }

func (l Limit) String() string { return fmt.Sprintf("%d per %s", l.Count, l.Window) }

// Counts are the deletes counted in each limit's window at now.
func Counts(limits []Limit, st *v1alpha1.DeletionFlowControlStatus, now time.Time) []int32 {
	normalize(limits, st, now)
	out := make([]int32, len(limits))
	for i, l := range limits {
		from := now.Unix() - int64(l.Window/time.Second)
		for _, s := range st.Buckets[i].Slots {
			if s.Start+st.Buckets[i].Width > from {
				out[i] += s.Count
			}
		}
	}
	return out
}

// normalize makes the buckets match the limits and drops slots no window
// reaches any more.
func normalize(limits []Limit, st *v1alpha1.DeletionFlowControlStatus, now time.Time) {
	if len(st.Buckets) != len(limits) {
		st.Buckets = make([]v1alpha1.LimitBuckets, len(limits))
	}
	for i, l := range limits {
		b := &st.Buckets[i]
		if b.Width != l.width() {
			*b = v1alpha1.LimitBuckets{Width: l.width()}
		}
		from := now.Unix() - int64(l.Window/time.Second) - b.Width
		b.Slots = slices.DeleteFunc(b.Slots, func(s v1alpha1.Slot) bool { return s.Start <= from })
	}
	if st.Breaker.State == "" {
		st.Breaker.State = Closed
	}
}

// Request is one counted delete.
type Request struct {
	// Name is the DeletionFlowControl's.
	Name string
	Spec v1alpha1.DeletionFlowControlSpec
	// Requester and Object are recorded when denied.
	Requester, Object string
}

// Decide decides one counted delete at now and updates st: an admitted
// delete is counted; a denied one is recorded, and may trip the breaker.
// In DryRun mode every delete is admitted, and a tripping one keeps its
// rule and message to be reported.
func Decide(r Request, st *v1alpha1.DeletionFlowControlStatus, now time.Time) (verdict.Verdict, error) {
	limits, err := Limits(r.Spec)
	if err != nil {
		return verdict.Verdict{}, err
	}
	counts := Counts(limits, st, now)
	dryRun := r.Spec.Mode == v1alpha1.FlowDryRun
	full := -1
	for i, l := range limits {
		if counts[i]+1 > l.Count {
			full = i
			break
		}
	}
	if st.Breaker.State == Open && r.Spec.Breaker == v1alpha1.BreakerAuto && full < 0 {
		st.Breaker = v1alpha1.BreakerStatus{State: Closed}
	}
	var v verdict.Verdict
	switch {
	case st.Breaker.State == Open:
		v = verdict.Verdict{Reason: RuleBreaker, Message: fmt.Sprintf(
			"DeletionFlowControl %q has tripped its breaker (%s, at %s): %s is not deleted. %s",
			r.Name, st.Breaker.Reason, st.Breaker.TrippedAt.UTC().Format(time.RFC3339), r.Object, advice(r))}
	case full >= 0:
		reason := fmt.Sprintf("limit %s reached: %d deletes counted in the last %s", limits[full], counts[full], limits[full].Window)
		st.Breaker = v1alpha1.BreakerStatus{State: Open, TrippedAt: ptrTime(now), Reason: reason}
		v = verdict.Verdict{Reason: RuleLimit, Message: fmt.Sprintf(
			"DeletionFlowControl %q: %s; its breaker is now open and %s is not deleted. %s", r.Name, reason, r.Object, advice(r))}
	default:
		v = verdict.Allow
	}
	st.Counts = counts
	if v.Allowed || dryRun {
		for i, l := range limits {
			add(&st.Buckets[i], now.Unix()/l.width()*l.width())
			st.Counts[i]++
		}
		if !v.Allowed {
			v.Allowed = true // DryRun: reported, never denied
		}
		return v, nil
	}
	st.RecentDenied = ledger.Recent(st.RecentDenied, v1alpha1.DeniedRequester{User: r.Requester, Time: metav1.NewTime(now), Object: r.Object}, maxRecent)
	return v, nil
}

func advice(r Request) string {
	how := "a person resets it"
	if r.Spec.Breaker == v1alpha1.BreakerAuto {
		how = "every limit has room again, or a person resets it"
	}
	return fmt.Sprintf("Deletes it counts are denied until %s: see `rampart flowcontrol status %s`, then `rampart flowcontrol reset %s` if the deletions are intended.",
		how, r.Name, r.Name)
}

func add(b *v1alpha1.LimitBuckets, start int64) {
	if n := len(b.Slots); n > 0 && b.Slots[n-1].Start == start {
		b.Slots[n-1].Count++
		return
	}
	b.Slots = append(b.Slots, v1alpha1.Slot{Start: start, Count: 1})
}

// Reset closes the breaker and clears the counts: a person has decided the
// deletions are intended.
func Reset(st *v1alpha1.DeletionFlowControlStatus) {
	st.Breaker = v1alpha1.BreakerStatus{State: Closed}
	st.Buckets, st.Counts = nil, nil
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}

// Describe renders the status for people.
func Describe(spec v1alpha1.DeletionFlowControlSpec, st v1alpha1.DeletionFlowControlStatus, now time.Time) string {
	limits, err := Limits(spec)
	if err != nil {
		return err.Error()
	}
	st = *st.DeepCopy()
	counts := Counts(limits, &st, now)
	var parts []string
	for i, l := range limits {
		parts = append(parts, fmt.Sprintf("%d/%d in %s", counts[i], l.Count, l.Window))
	}
	s := "breaker " + st.Breaker.State + "; " + strings.Join(parts, ", ")
	if st.Breaker.State == Open {
		s += "; tripped " + st.Breaker.TrippedAt.UTC().Format(time.RFC3339) + ": " + st.Breaker.Reason
	}
	return s
}

// SyncCondition mirrors the breaker in a BreakerOpen condition.
func SyncCondition(st *v1alpha1.DeletionFlowControlStatus, generation int64) {
	c := metav1.Condition{Type: "BreakerOpen", Status: metav1.ConditionFalse, Reason: "Closed", ObservedGeneration: generation,
		Message: "deletes are admitted within the limits"}
	if st.Breaker.State == Open {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "Tripped", st.Breaker.Reason
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
