package traffic

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

func TestListCost(t *testing.T) {
	ns := Request{Verb: "list", Resource: "configmaps", Namespace: "big"}
	all := Request{Verb: "list", Resource: "configmaps"}
	paged := ns
	paged.Limit = 500
	synced := ObjectCounts{Cluster: 5000, ClusterKnown: true, Namespace: 1200, NamespaceKnown: true}
	metricOnly := ObjectCounts{Cluster: 5000, ClusterKnown: true}
	for _, tc := range []struct {
		name   string
		r      Request
		counts ObjectCounts
		want   int64
	}{
		{"namespaced LIST costs its namespace", ns, synced, 1200},
		{"all-namespaces LIST costs the cluster", all, synced, 5000},
		{"a limit caps the cost", paged, synced, 500},
		{"a limit above the count does not raise it", Request{Verb: "list", Namespace: "small", Limit: 500}, ObjectCounts{Cluster: 5000, ClusterKnown: true, Namespace: 3, NamespaceKnown: true}, 3},
		{"namespace not synced yet: the cluster count bounds it", ns, metricOnly, 5000},
		{"namespace not synced yet, with a limit", paged, metricOnly, 500},
		{"nothing known costs nothing", ns, ObjectCounts{}, 0},
		{"cluster-scoped LIST with nothing known", all, ObjectCounts{}, 0},
		{"an empty namespace costs nothing", ns, ObjectCounts{Cluster: 5000, ClusterKnown: true, NamespaceKnown: true}, 0},
		// The watch cache serves resourceVersion=0 whole, limit or not.
		{"resourceVersion=0 ignores the limit", Request{Verb: "list", Namespace: "big", Limit: 10, ResourceVersion: "0"}, synced, 1200},
		{"a limit from an exact resourceVersion is honoured", Request{Verb: "list", Namespace: "big", Limit: 10, ResourceVersion: "77"}, synced, 10},
		{"one object named by a field selector", Request{Verb: "list", Namespace: "big", SingleObject: true}, synced, 1},
		// Watches cost what they stream before the changes.
		{"an informer's watch-list costs its scope", Request{Verb: "watch", Namespace: "big", SendInitialEvents: ptrTo(true), ResourceVersion: "77"}, synced, 1200},
		{"a legacy watch without resourceVersion streams its scope", Request{Verb: "watch"}, synced, 5000},
		{"a legacy watch from resourceVersion 0 streams its scope", Request{Verb: "watch", Namespace: "big", ResourceVersion: "0"}, synced, 1200},
		{"a watch resuming from a resourceVersion costs nothing", Request{Verb: "watch", Namespace: "big", ResourceVersion: "77"}, synced, 0},
		{"sendInitialEvents=false costs nothing", Request{Verb: "watch", Namespace: "big", SendInitialEvents: ptrTo(false)}, synced, 0},
		{"a watch-list of one named object", Request{Verb: "watch", Namespace: "big", SendInitialEvents: ptrTo(true), SingleObject: true}, synced, 1},
	} {
		if got := ListCost(tc.r, tc.counts); got != tc.want {
			t.Errorf("%s: ListCost = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestUnpaginatedLargeListRefusedOnlyOnARealCount(t *testing.T) {
	p := policy(t, "no-big-lists", `{precedence: 1, action: Limit, match: [{}], list: {maxUnpaginatedObjects: 1000}}`)
	big := ObjectCounts{Cluster: 5000, ClusterKnown: true, Namespace: 1200, NamespaceKnown: true}
	small := ObjectCounts{Cluster: 5000, ClusterKnown: true, Namespace: 3, NamespaceKnown: true}
	ns := func(q string) Request {
		r := Request{Verb: "list", Resource: "configmaps", Namespace: "big", User: "alice"}
		switch q {
		case "limit":
			r.Limit = 500
		case "rv0":
			r.ResourceVersion = "0"
		case "rv-exact":
			r.ResourceVersion = "12345"
		}
		return r
	}
	for _, tc := range []struct {
		name    string
		r       Request
		counts  ObjectCounts
		refused bool
	}{
		{"unpaginated LIST of a big namespace", ns(""), big, true},
		{"unpaginated LIST at an exact resourceVersion is read from etcd too", ns("rv-exact"), big, true},
		{"paginated with limit=500", ns("limit"), big, false},
		{"from the API server's cache (resourceVersion=0)", ns("rv0"), big, false},
		{"a small namespace in a big cluster", ns(""), small, false},
		{"namespace count not synced: not refused on the cluster's count", ns(""), ObjectCounts{Cluster: 5000, ClusterKnown: true}, false},
		{"all namespaces, cluster count from the metric", Request{Verb: "list", Resource: "configmaps", User: "alice"}, ObjectCounts{Cluster: 5000, ClusterKnown: true}, true},
		{"all namespaces, count unknown", Request{Verb: "list", Resource: "configmaps", User: "alice"}, ObjectCounts{}, false},
		{"exactly at the threshold", ns(""), ObjectCounts{Namespace: 1000, NamespaceKnown: true}, false},
		{"one object named by a field selector", Request{Verb: "list", Resource: "configmaps", Namespace: "big", User: "alice", SingleObject: true}, big, false},
	} {
		v := NewGuards().DecideList(&p, tc.r, tc.counts, time.Unix(0, 0))
		if v.Allowed == tc.refused {
			t.Errorf("%s: admitted %v, want %v (%s)", tc.name, v.Allowed, !tc.refused, v.Message)
			continue
		}
		if !tc.refused {
			continue
		}
		if v.Refusal != verdict.Forbidden || retryAfterSeconds(v, 0.5) != 0 {
			t.Errorf("%s: refusal %v, Retry-After %d; want Forbidden (403) without Retry-After: a retry as-is cannot succeed", tc.name, v.Refusal, retryAfterSeconds(v, 0.5))
		}
		for _, want := range []string{`"no-big-lists"`, "configmaps in", "limit=500", "resourceVersion=0", "more than 1000"} {
			if !strings.Contains(v.Message, want) {
				t.Errorf("%s: message %q lacks %q", tc.name, v.Message, want)
			}
		}
	}
}

func TestListBudgetPerClientWithDebt(t *testing.T) {
	p := policy(t, "list-budget", `{precedence: 1, action: Limit, match: [{}], list: {objectsPerSecond: 100, objectsBurst: 1000}}`)
	g := NewGuards()
	t0 := time.Unix(1000, 0)
	counts := func(n int64) ObjectCounts {
		return ObjectCounts{Namespace: n, NamespaceKnown: true, Cluster: n, ClusterKnown: true}
	}
	list := func(user string, n int64, at time.Duration) Verdict {
		return g.DecideList(&p, Request{Verb: "list", Resource: "configmaps", Namespace: "big", User: user}, counts(n), t0.Add(at))
	}
	// A LIST larger than the burst passes from a full budget...
	if v := list("alice", 1500, 0); !v.Allowed {
		t.Fatalf("a 1500-object LIST from a full 1000-object budget: refused (%s), want admitted into debt", v.Message)
	}
	// ...and leaves alice 500 objects in debt: 10 more objects need
	// (500+10)/100 = 5.1 s.
	v := list("alice", 10, time.Second)
	if v.Allowed || v.Reason != ReasonListCost || v.Refusal != verdict.Throttled {
		t.Fatalf("alice right after her big LIST: %+v, want a 429 list-cost refusal", v)
	}
	if v.RetryAfter < 4*time.Second || v.RetryAfter > 4200*time.Millisecond {
		t.Errorf("alice's wait %v, want 4.1s (debt 500 + cost 10 at 100/s, 1s already paid)", v.RetryAfter)
	}
	for _, want := range []string{`"list-budget"`, "100 objects/s", "burst 1000", "costs about 10 objects", `user "alice"`, "limit=500", "resourceVersion=0"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
	if ra := retryAfterSeconds(v, 0); ra < 5 {
		t.Errorf("Retry-After %d, want at least the wait (5 s)", ra)
	}
	// Bob, in the same policy, has a budget of his own.
	if v := list("bob", 800, time.Second); !v.Allowed {
		t.Errorf("bob: %s, want admitted: each client has its own budget", v.Message)
	}
	if v := list("alice", 10, 5200*time.Millisecond); !v.Allowed {
		t.Errorf("alice after paying her debt: %s", v.Message)
	}
	// An over-burst LIST waits for a full budget, not just for its
	// burst's worth.
	if v := list("alice", 2000, 6*time.Second); v.Allowed || v.RetryAfter < 9*time.Second {
		t.Errorf("alice's 2000-object LIST from a nearly empty budget: admitted %v, wait %v; want a refusal until the budget is full (~9.9s)", v.Allowed, v.RetryAfter)
	}
	if v := list("alice", 2000, 16*time.Second); !v.Allowed {
		t.Errorf("alice's 2000-object LIST from a full budget: %s", v.Message)
	}
	// Unknown counts cost nothing: no refusal on a guess.
	if v := g.DecideList(&p, Request{Verb: "list", Resource: "configmaps", Namespace: "big", User: "alice"}, ObjectCounts{}, t0.Add(16*time.Second)); !v.Allowed {
		t.Errorf("a LIST of unknown size while in debt: %s, want admitted", v.Message)
	}
}

func TestListBudgetKeysBounded(t *testing.T) {
	p := policy(t, "list-budget", `{precedence: 1, action: Limit, match: [{}], list: {objectsPerSecond: 10, key: UserAgent}}`)
	g := NewGuards()
	now := time.Unix(0, 0)
	c := ObjectCounts{Namespace: 10, NamespaceKnown: true}
	for i := range MaxKeys + 50 {
		g.DecideList(&p, Request{Verb: "list", Namespace: "x", UserAgent: fmt.Sprint("agent-", i)}, c, now)
	}
	if n := len(g.lists["list-budget"].clients.m); n > MaxKeys+1 { // +1: the overflow
		t.Fatalf("%d budgets, want at most %d", n, MaxKeys)
	}
	// A minute later the idle budgets are gone.
	g.DecideList(&p, Request{Verb: "list", Namespace: "x", UserAgent: "late"}, c, now.Add(2*time.Minute))
	if n := len(g.lists["list-budget"].clients.m); n != 1 {
		t.Fatalf("%d budgets after everyone went idle, want 1", n)
	}
}

func TestWatchCapPerClientReleasedWhenWatchEnds(t *testing.T) {
	p := policy(t, "watches", `{precedence: 1, action: Limit, match: [{}], watch: {maxPerClient: 2}}`)
	g := NewGuards()
	now := time.Unix(0, 0)
	w := func(user string) Verdict { return g.DecideWatch(&p, Request{Verb: "watch", User: user}, now) }
	a1, a2 := w("alice"), w("alice")
	if !a1.Allowed || !a2.Allowed {
		t.Fatal("alice's first two watches refused")
	}
	v := w("alice")
	if v.Allowed || v.Reason != ReasonWatchMax || v.Refusal != verdict.Throttled {
		t.Fatalf("alice's third watch: %+v, want a watch-max refusal", v)
	}
	for _, want := range []string{`"watches"`, "2 open watches", `"alice" holds 2`, "SharedInformerFactory"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
	if !w("bob").Allowed {
		t.Error("bob refused: the cap is per client")
	}
	a1.Done()
	a1.Done() // twice is once
	if !w("alice").Allowed {
		t.Fatal("alice refused after closing a watch")
	}
	if w("alice").Allowed {
		t.Fatal("alice admitted a third open watch: a double Done counted twice")
	}
	// An edited policy keeps counting the watches still open.
	p.Generation++
	p.Spec.Watch.MaxPerClient = ptrTo(int32(3))
	if !w("alice").Allowed || w("alice").Allowed {
		t.Fatal("after raising the cap to 3, alice (2 open) should get exactly one more")
	}
	a2.Done()
	if !w("alice").Allowed {
		t.Fatal("a watch opened before the edit, once closed, did not free its place")
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestNewWatchRatePerClient(t *testing.T) {
	p := policy(t, "watch-rate", `{precedence: 1, action: Limit, match: [{}], watch: {newPerSecond: 2, newBurst: 4}}`)
	g := NewGuards()
	t0 := time.Unix(0, 0)
	admitted := 0
	var last Verdict
	for range 10 {
		if last = g.DecideWatch(&p, Request{Verb: "watch", User: "alice"}, t0); last.Allowed {
			admitted++
		}
	}
	if admitted != 4 || last.Reason != ReasonWatchRate || last.RetryAfter != 500*time.Millisecond {
		t.Fatalf("10 watches at once with burst 4: %d admitted, last %+v; want 4 and a 0.5s wait", admitted, last)
	}
	if !g.DecideWatch(&p, Request{Verb: "watch", User: "bob"}, t0).Allowed {
		t.Error("bob refused: rates are per client")
	}
	if !g.DecideWatch(&p, Request{Verb: "watch", User: "alice"}, t0.Add(500*time.Millisecond)).Allowed {
		t.Error("alice refused after the wait")
	}
}

// 200 watchers reconnect in the same instant against a policy-wide 50
// new watches/s. Each refused one comes back at its Retry-After, as
// client-go does: they are admitted over about 4 s, at about the rate,
// not at once and not in one crowd a few seconds later.
func TestReconnectStormSpreadOverTheRate(t *testing.T) {
	p := policy(t, "storm", `{precedence: 1, action: Limit, match: [{}], watch: {policyNewPerSecond: 50}}`)
	g := NewGuards()
	t0 := time.Unix(0, 0)
	perSecond := map[int]int{} // admissions by whole second
	retryAfters := map[int]int{}
	pending := map[int][]int{} // second -> watchers coming back then
	for i := range 200 {
		pending[0] = append(pending[0], i)
	}
	for sec := 0; sec < 30 && len(pending) > 0; sec++ {
		for n, i := range pending[sec] {
			// The storm's first wave comes in one instant; later ones
			// a millisecond apart.
			at := t0.Add(time.Duration(sec)*time.Second + time.Duration(min(sec, 1)*n)*time.Millisecond)
			v := g.DecideWatch(&p, Request{Verb: "watch", User: fmt.Sprint("node-", i)}, at)
			if v.Allowed {
				perSecond[sec]++
				continue
			}
			if v.Reason != ReasonWatchStorm || v.Refusal != verdict.Throttled {
				t.Fatalf("refusal %+v, want a watch-storm 429", v)
			}
			ra := retryAfterSeconds(v, 0.99)
			if sec == 0 {
				retryAfters[ra]++
			}
			pending[sec+ra] = append(pending[sec+ra], i)
		}
		delete(pending, sec)
	}
	total, last := 0, 0
	for sec, n := range perSecond {
		total += n
		last = max(last, sec)
		if n > 50+3 { // 50, plus what refills while a wave arrives
			t.Errorf("second %d admitted %d watches, want about the rate (50)", sec, n)
		}
	}
	if total != 200 || last < 3 || last > 5 {
		t.Errorf("admitted %d by second %d (%v), want all 200 over ~4 s", total, last, perSecond)
	}
	// The 150 refused at once are told to come back at different times:
	// about 50 for each of the next seconds, not all at the same one.
	for ra, n := range retryAfters {
		if n > 51 {
			t.Errorf("%d watchers told Retry-After %d: the storm is not spread (%v)", n, ra, retryAfters)
		}
	}
	if len(retryAfters) < 3 {
		t.Errorf("Retry-Afters %v: want at least 3 distinct seconds for 150 refusals at 50/s", retryAfters)
	}
	for _, want := range []string{`"storm"`, "50 new watches/s", "without relisting"} {
		v := g.DecideWatch(&p, Request{Verb: "watch", User: "late"}, t0.Add(10*time.Second))
		for range 60 {
			if v.Allowed {
				v = g.DecideWatch(&p, Request{Verb: "watch", User: "late"}, t0.Add(10*time.Second))
			}
		}
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
}

// An informer's initial sync (a watch-list) spends the same object budget
// as a LIST: a relist storm of informers cannot pass around it. It is
// never refused as unpaginated (the watch cache serves it), and a watch
// refused by the watch guard gives its charge back.
func TestWatchListSpendsTheListBudget(t *testing.T) {
	p := policy(t, "informers", `{precedence: 1, action: Limit, match: [{}], list: {objectsPerSecond: 100, objectsBurst: 1000, maxUnpaginatedObjects: 10}, watch: {maxPerClient: 2}}`)
	g := NewGuards()
	t0 := time.Unix(1000, 0)
	counts := ObjectCounts{Namespace: 600, NamespaceKnown: true, Cluster: 600, ClusterKnown: true}
	sync := func(user string) Request {
		return Request{Verb: "watch", Resource: "configmaps", Namespace: "big", User: user, SendInitialEvents: ptrTo(true)}
	}
	first := g.Decide(&p, sync("alice"), counts, t0)
	if !first.Allowed {
		t.Fatalf("alice's first watch-list of 600 objects (budget 1000, maxUnpaginatedObjects 10): %s, want admitted", first.Message)
	}
	v := g.Decide(&p, sync("alice"), counts, t0)
	if v.Allowed || v.Reason != ReasonListCost || v.Refusal != verdict.Throttled {
		t.Fatalf("alice's second watch-list at once: %+v, want a 429 list-cost refusal", v)
	}
	// 600 needed, 400 left: 2 s at 100/s.
	if v.RetryAfter < 1900*time.Millisecond || v.RetryAfter > 2100*time.Millisecond {
		t.Errorf("wait %v, want 2s", v.RetryAfter)
	}
	if ra := retryAfterSeconds(v, 0); ra < 2 {
		t.Errorf("Retry-After %d, want at least 2", ra)
	}
	for _, want := range []string{`"informers"`, "100 objects/s", "initial sync", "costs about 600 objects", `user "alice"`, "SharedInformerFactory"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
	// A LIST by the same client is refused too: one budget.
	if l := g.Decide(&p, Request{Verb: "list", Resource: "configmaps", Namespace: "big", User: "alice", ResourceVersion: "0"}, counts, t0); l.Allowed {
		t.Error("alice's LIST right after her watch-list was admitted: the budget is shared")
	}
	// Resuming watches cost nothing and pass.
	resume := Request{Verb: "watch", Resource: "configmaps", Namespace: "big", User: "alice", ResourceVersion: "77"}
	if r := g.Decide(&p, resume, counts, t0); !r.Allowed {
		t.Errorf("alice's resuming watch: %s", r.Message)
	} else {
		r.Done()
	}
	// The refused sync is admitted once the budget has refilled.
	if v := g.Decide(&p, sync("alice"), counts, t0.Add(2100*time.Millisecond)); !v.Allowed {
		t.Fatalf("alice's watch-list after 2.1s: %s", v.Message)
	}
	// Alice now holds 2 watches: the watch guard refuses a third, and the
	// 600 objects it would have cost stay in her budget.
	at := t0.Add(10 * time.Second) // budget full again
	if w := g.Decide(&p, sync("alice"), counts, at); w.Allowed || w.Reason != ReasonWatchMax {
		t.Fatalf("alice's third open watch: %+v, want watch-max", w)
	}
	first.Done()
	if w := g.Decide(&p, sync("alice"), counts, at); !w.Allowed {
		t.Fatalf("after closing a watch, alice's watch-list from a full budget: %s; the watch-max refusal kept its charge", w.Message)
	}
}

// retryAfterSeconds is the Retry-After the gateway sends for v.
func retryAfterSeconds(v Verdict, jitter float64) int {
	return int(Spread(v.Verdict, jitter).RetryAfter / time.Second)
}
