package flowcontrol

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func spec(reset v1alpha1.BreakerReset, mode v1alpha1.FlowControlMode, limits ...v1alpha1.DeletionLimit) v1alpha1.DeletionFlowControlSpec {
	return v1alpha1.DeletionFlowControlSpec{Limits: limits, Breaker: reset, Mode: mode}
}

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestLimitTripsTheBreaker(t *testing.T) {
	r := Request{Name: "pods", Spec: spec(v1alpha1.BreakerManual, v1alpha1.FlowEnforce, v1alpha1.DeletionLimit{Count: 10, Window: "10m"}), Requester: "bot", Object: "pods/x"}
	var st v1alpha1.DeletionFlowControlStatus
	for i := range 10 {
		v, err := Decide(r, &st, t0.Add(time.Duration(i)*time.Second))
		if err != nil || !v.Allowed {
			t.Fatalf("delete %d: %+v %v", i, v, err)
		}
	}
	v, _ := Decide(r, &st, t0.Add(11*time.Second))
	if v.Allowed || !Tripped(v) || st.Breaker.State != Open {
		t.Fatalf("11th delete: %+v, breaker %s", v, st.Breaker.State)
	}
	for _, want := range []string{`DeletionFlowControl "pods"`, "10 per 10m0s reached", "rampart flowcontrol reset pods"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
	// Manual: still open after the window has passed.
	v, _ = Decide(r, &st, t0.Add(time.Hour))
	if v.Allowed || v.Reason != RuleBreaker {
		t.Fatalf("an hour later with a Manual breaker: %+v", v)
	}
	if len(st.RecentDenied) != 2 || st.RecentDenied[0].User != "bot" {
		t.Errorf("recentDenied = %+v", st.RecentDenied)
	}
	Reset(&st)
	if v, _ := Decide(r, &st, t0.Add(time.Hour)); !v.Allowed {
		t.Fatalf("after reset: %+v", v)
	}
}

func TestAutoBreakerClosesWhenTheWindowAllows(t *testing.T) {
	r := Request{Name: "nodes", Spec: spec(v1alpha1.BreakerAuto, v1alpha1.FlowEnforce, v1alpha1.DeletionLimit{Count: 3, Window: "1m"})}
	var st v1alpha1.DeletionFlowControlStatus
	for i := range 3 {
		if v, _ := Decide(r, &st, t0.Add(time.Duration(i)*time.Second)); !v.Allowed {
			t.Fatal("denied under the limit")
		}
	}
	if v, _ := Decide(r, &st, t0.Add(5*time.Second)); v.Allowed {
		t.Fatal("4th in a minute admitted")
	}
	if v, _ := Decide(r, &st, t0.Add(30*time.Second)); v.Allowed {
		t.Fatal("admitted while the window is still full")
	}
	if v, _ := Decide(r, &st, t0.Add(70*time.Second)); !v.Allowed || st.Breaker.State != Closed {
		t.Fatalf("after the window: %+v breaker %s", v, st.Breaker.State)
	}
}

func TestSeveralLimitsApplyTogether(t *testing.T) {
	r := Request{Name: "x", Spec: spec(v1alpha1.BreakerAuto, v1alpha1.FlowEnforce,
		v1alpha1.DeletionLimit{Count: 5, Window: "1m"}, v1alpha1.DeletionLimit{Count: 8, Window: "1h"})}
	var st v1alpha1.DeletionFlowControlStatus
	admitted := 0
	for m := range 10 { // 3 a minute for 10 minutes
		for s := range 3 {
			if v, _ := Decide(r, &st, t0.Add(time.Duration(m)*time.Minute+time.Duration(s)*time.Second)); v.Allowed {
				admitted++
			}
		}
	}
	if admitted != 8 {
		t.Fatalf("admitted %d, want 8 (the hourly limit)", admitted)
	}
}

func TestDryRunCountsButNeverDenies(t *testing.T) {
	r := Request{Name: "x", Spec: spec(v1alpha1.BreakerManual, v1alpha1.FlowDryRun, v1alpha1.DeletionLimit{Count: 2, Window: "1m"})}
	var st v1alpha1.DeletionFlowControlStatus
	tripped := false
	for i := range 5 {
		v, _ := Decide(r, &st, t0.Add(time.Duration(i)*time.Second))
		if !v.Allowed {
			t.Fatal("DryRun denied")
		}
		tripped = tripped || Tripped(v)
	}
	if !tripped || st.Breaker.State != Open || st.Counts[0] != 5 {
		t.Fatalf("DryRun must report the trip and count: tripped=%v state=%s counts=%v", tripped, st.Breaker.State, st.Counts)
	}
}

// No sliding window of the limit's length ever holds more admitted
// deletes than the limit, whatever the arrival times.
func TestNoWindowEverExceedsTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := Request{Name: "x", Spec: spec(v1alpha1.BreakerAuto, v1alpha1.FlowEnforce, v1alpha1.DeletionLimit{Count: 20, Window: "10m"})}
	var st v1alpha1.DeletionFlowControlStatus
	var admitted []time.Time
	now := t0
	for range 20000 {
		now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
		if v, _ := Decide(r, &st, now); v.Allowed {
			admitted = append(admitted, now)
		}
	}
	j := 0
	for i := range admitted {
		for admitted[i].Sub(admitted[j]) >= 10*time.Minute {
			j++
		}
		if n := i - j + 1; n > 20 {
			t.Fatalf("%d deletes admitted within 10m ending %s", n, admitted[i])
		}
	}
	if len(admitted) < 20000*20/(10*60/2)/2 {
		t.Errorf("only %d admitted: the limit is far too conservative", len(admitted))
	}
	// Slots no window reaches are dropped: the status stays small.
	if n := len(st.Buckets[0].Slots); n > slotsPerWindow+1 {
		t.Errorf("%d slots kept", n)
	}
}

func BenchmarkAdmit(b *testing.B) {
	r := Request{Name: "x", Spec: spec(v1alpha1.BreakerManual, v1alpha1.FlowEnforce,
		v1alpha1.DeletionLimit{Count: 1 << 30, Window: "10m"}, v1alpha1.DeletionLimit{Count: 1 << 30, Window: "1h"}, v1alpha1.DeletionLimit{Count: 1 << 30, Window: "24h"})}
	var st v1alpha1.DeletionFlowControlStatus
	now := t0
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		if v, _ := Decide(r, &st, now); !v.Allowed {
			b.Fatal("denied")
		}
	}
}

func BenchmarkAdmitBreakerOpen(b *testing.B) {
	r := Request{Name: "x", Spec: spec(v1alpha1.BreakerManual, v1alpha1.FlowEnforce,
		v1alpha1.DeletionLimit{Count: 1, Window: "10m"}, v1alpha1.DeletionLimit{Count: 5, Window: "1h"}, v1alpha1.DeletionLimit{Count: 50, Window: "24h"})}
	var st v1alpha1.DeletionFlowControlStatus
	_, _ = Decide(r, &st, t0)
	_, _ = Decide(r, &st, t0.Add(time.Second)) // trips
	now := t0.Add(2 * time.Second)
	for b.Loop() {
		st.RecentDenied = st.RecentDenied[:0]
		if v, _ := Decide(r, &st, now); v.Allowed {
			b.Fatal("admitted with the breaker open")
		}
	}
}
