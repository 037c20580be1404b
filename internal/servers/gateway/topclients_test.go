package gateway

import (
	"fmt"
	"testing"
	"time"
)

func TestTopClientsBoundedAndFollowCurrentLoad(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	top := newTopClients(3, 10, time.Minute)
	top.now = func() time.Time { return now }
	top.decayed = now
	for i := range 1000 {
		top.Add(fmt.Sprintf("one-off-%d", i)) // a scan of many clients
		if i%2 == 0 {
			top.Add("controller")
		}
		if i%4 == 0 {
			top.Add("kubectl-user")
		}
	}
	if n := len(top.counts); n > 10 {
		t.Fatalf("%d counters kept, want at most 10", n)
	}
	got := top.Top()
	if len(got) != 3 || got[0].client != "controller" || got[1].client != "kubectl-user" {
		t.Fatalf("top clients %+v, want controller then kubectl-user first", got)
	}
	// An hour later a new busy client outranks the old ones.
	now = now.Add(time.Hour)
	for range 50 {
		top.Add("new-batch-job")
	}
	if got := top.Top(); got[0].client != "new-batch-job" {
		t.Fatalf("top clients %+v an hour later, want the new busy client first", got)
	}
}
