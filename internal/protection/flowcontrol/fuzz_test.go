package flowcontrol

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// FuzzAdmit: for any flow-control spec and stored status (both outside
// input: the status is written by every replica and readable by admins),
// Admit never panics, and a run of deletes at one instant admits no more
// than the smallest limit.
func FuzzAdmit(f *testing.F) {
	for _, s := range []struct{ spec, status string }{
		{`{"limits":[{"count":5,"window":"10m"}]}`, `{}`},
		{`{"limits":[{"count":3,"window":"10s"},{"count":100,"window":"720h"}],"breaker":"Auto"}`, `{"breaker":{"state":"Open"}}`},
		{`{"limits":[{"count":2,"window":"1h"}],"mode":"DryRun"}`, `{"buckets":[{"width":120,"slots":[{"start":1795000000,"count":1}]}]}`},
		{`{"limits":[{"count":1,"window":"2562047h"}]}`, `{"buckets":[{"width":-1,"slots":[{"start":-9223372036854775808,"count":2147483647}]}]}`},
		{`{"limits":[{"count":1,"window":"1s"}]}`, `{}`},
	} {
		f.Add([]byte(s.spec), []byte(s.status), int64(1795000000))
	}
	f.Fuzz(func(t *testing.T, specJSON, statusJSON []byte, unix int64) {
		var spec v1alpha1.DeletionFlowControlSpec
		var st v1alpha1.DeletionFlowControlStatus
		if json.Unmarshal(specJSON, &spec) != nil || json.Unmarshal(statusJSON, &st) != nil || len(spec.Limits) > 8 {
			return
		}
		limits, err := Limits(spec)
		if err != nil || len(limits) == 0 {
			return
		}
		smallest := limits[0].Count
		for _, l := range limits {
			smallest = min(smallest, l.Count)
		}
		now := time.Unix(unix%(1<<34), 0)
		// Start from the state as Reset leaves it, so that only this run
		// is counted.
		st = v1alpha1.DeletionFlowControlStatus{}
		admitted := 0
		for i := 0; i < 20; i++ {
			allowed, err := decide(Request{Name: "fc", Spec: spec, Requester: "u", Object: "pod/x"}, &st, now)
			if err != nil {
				t.Fatal(err)
			}
			if allowed {
				admitted++
			}
		}
		if spec.Mode != v1alpha1.FlowDryRun && admitted > int(max(smallest, 0)) {
			t.Fatalf("admitted %d deletes at one instant under %v", admitted, limits)
		}
		_ = Describe(spec, st, now)
	})
}

// FuzzAdmitStoredStatus: a status as stored (any slots, widths, breaker)
// never makes Admit panic.
func FuzzAdmitStoredStatus(f *testing.F) {
	f.Add([]byte(`{"buckets":[{"width":20,"slots":[{"start":1795000000,"count":3}]}],"breaker":{"state":"Closed"}}`), int64(1795000000))
	f.Add([]byte(`{"buckets":[{"width":-1,"slots":[{"start":-9223372036854775808,"count":2147483647}]},{"width":0}]}`), int64(-1))
	f.Fuzz(func(t *testing.T, statusJSON []byte, unix int64) {
		var st v1alpha1.DeletionFlowControlStatus
		if json.Unmarshal(statusJSON, &st) != nil {
			return
		}
		spec := v1alpha1.DeletionFlowControlSpec{Limits: []v1alpha1.DeletionLimit{{Count: 3, Window: "10m"}, {Count: 10, Window: "1h"}}}
		if _, err := decide(Request{Name: "fc", Spec: spec}, &st, time.Unix(unix%(1<<34), 0)); err != nil {
			t.Fatal(err)
		}
		_ = Describe(spec, st, time.Unix(unix%(1<<34), 0))
	})
}

// decide is the one call of the decision under test.
func decide(r Request, st *v1alpha1.DeletionFlowControlStatus, now time.Time) (bool, error) {
	v, err := Decide(r, st, now)
	return v.Allowed, err
}
