package apf

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

func TestBuiltinSchemasClassifyAsTheAPIServerDoes(t *testing.T) {
	cfg := Builtin()
	for _, tc := range []struct {
		name   string
		r      Request
		schema string
	}{
		{"a node's own pods", Request{User: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}, IsResource: true, Verb: "list", Resource: "pods"}, "system-nodes"},
		{"a node's lease", Request{User: "system:node:n1", Groups: []string{"system:nodes"}, IsResource: true, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, "system-node-high"},
		{"the controller manager's leader lease", Request{User: "system:kube-controller-manager", Groups: []string{"system:authenticated"}, IsResource: true, Verb: "update", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"}, "system-leader-election"},
		{"the controller manager", Request{User: "system:kube-controller-manager", Groups: []string{"system:authenticated"}, IsResource: true, Verb: "list", Resource: "pods"}, "kube-controller-manager"},
		{"a kube-system service account", Request{User: "system:serviceaccount:kube-system:deployment-controller", Groups: []string{"system:serviceaccounts", "system:authenticated"}, IsResource: true, Verb: "get", APIGroup: "apps", Resource: "deployments", Namespace: "a"}, "kube-system-service-accounts"},
		{"an operator", Request{User: "system:serviceaccount:ops:backup", Groups: []string{"system:serviceaccounts", "system:authenticated"}, IsResource: true, Verb: "list", Resource: "secrets"}, "service-accounts"},
		{"a person", Request{User: "alice", Groups: []string{"system:authenticated"}, IsResource: true, Verb: "get", Resource: "pods", Subresource: "log", Namespace: "a"}, "global-default"},
		{"an admin", Request{User: "root", Groups: []string{"system:masters", "system:authenticated"}, IsResource: true, Verb: "delete", Resource: "nodes"}, "exempt"},
		{"a probe", Request{User: "system:anonymous", Groups: []string{"system:unauthenticated"}, Verb: "get", Path: "/readyz"}, "probes"},
		{"an anonymous version", Request{User: "system:anonymous", Groups: []string{"system:unauthenticated"}, Verb: "get", Path: "/version"}, "global-default"},
	} {
		if s, _ := cfg.Classify(tc.r); s == nil || s.Name != tc.schema {
			t.Errorf("%s: %v, want %s", tc.name, s, tc.schema)
		}
	}
}

// A backup tool's LIST storm, profiled in a calm hour: the suggestion
// isolates its LISTs on a level of their own sized from its peak, and in
// the replay of the storm its LISTs queue and are rejected on that level
// while the people's requests on global-default never wait.
func TestSuggestedLevelHoldsAHeavyListerToItsPeak(t *testing.T) {
	start := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	entry := func(at time.Duration, user, verb string, objects int64, latency time.Duration) trafficprofile.Entry {
		return trafficprofile.Entry{Time: start.Add(at), Latency: latency, User: user, Groups: []string{"system:authenticated"}, UserAgent: "t",
			Verb: verb, Resource: "pods", APIVersion: "v1", Namespace: "a", Code: 200, Objects: objects, Bytes: -1, Weight: 1}
	}
	var calm, storm []trafficprofile.Entry
	for i := range 100 {
		at := time.Duration(i) * 100 * time.Millisecond
		calm = append(calm, entry(at, "alice", "get", -1, 5*time.Millisecond))
		storm = append(storm, entry(at, "alice", "get", -1, 5*time.Millisecond))
		if i%10 == 0 {
			// One LIST of 500 pods (5 seats) a second, 200 ms each.
			calm = append(calm, entry(at, "backup", "list", 500, 200*time.Millisecond))
		}
		// The storm: 20 of them at once, every 100 ms, each 2 s long.
		for range 20 {
			storm = append(storm, entry(at, "backup", "list", 500, 2*time.Second))
		}
	}
	p := trafficprofile.NewProfiler()
	for i := range calm {
		p.Add(&calm[i])
	}
	r, err := p.Report("requests")
	if err != nil {
		t.Fatal(err)
	}
	s := Suggest(r, SuggestOptions{Margin: 0.2})
	var b bytes.Buffer
	if err := Write(&b, s); err != nil {
		t.Fatal(err)
	}
	schemas, levels, err := ReadObjects(b.Bytes(), "apf.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(levels) != 1 || levels[0].Name != "rampart-heavy-lists" || len(schemas) != 1 || !strings.Contains(b.String(), "name: backup") {
		t.Fatalf("want one level and one schema for backup's LISTs:\n%s", b.String())
	}
	cfg := Builtin()
	cfg.Add(schemas, levels)
	if got := cfg.NominalSeats(DefaultServerSeats)["rampart-heavy-lists"]; got < 6 || got > 8 {
		t.Errorf("heavy-lists level has %d seats, want its peak of 5 plus 20%% (6), rounded up by shares", got)
	}
	replay := func(es []trafficprofile.Entry) ReplayResult {
		rp := NewReplay(cfg, DefaultServerSeats)
		for i := range es {
			rp.Add(&es[i])
		}
		return rp.Result()
	}
	for _, c := range replay(calm).Clients {
		if c.Rejected > 0 {
			t.Errorf("the calm it was sized from: %+v rejected", c)
		}
	}
	res := replay(storm)
	var w bytes.Buffer
	WriteReplay(&w, res)
	for _, c := range res.Clients {
		switch c.User {
		case "alice":
			if c.FlowSchema != "global-default" || c.Queued != 0 || c.Rejected != 0 {
				t.Errorf("alice: %+v\n%s", c, w.String())
			}
		case "backup":
			if c.FlowSchema != "rampart-heavy-lists" || c.Rejected == 0 {
				t.Errorf("backup: %+v, want its LISTs rejected on its own level\n%s", c, w.String())
			}
		}
	}
	t.Log(w.String())
}

// Profiled in the storm itself (no calm period to size from), the heavy
// lister's peak is the storm: HeavyLevelSeats caps its level, and
// StormHeavyLevelSeats gives a level of that many seats (each LIST holds
// one in a level so small: that many LISTs at a time).
func TestHeavyLevelSeatsCapsALevelSizedInAStorm(t *testing.T) {
	start := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	p := trafficprofile.NewProfiler()
	for i := range 50 {
		for range 8 {
			p.Add(&trafficprofile.Entry{Time: start.Add(time.Duration(i) * 100 * time.Millisecond), Latency: 2 * time.Second, User: "tool",
				Groups: []string{"system:authenticated"}, UserAgent: "t", Verb: "list", Resource: "pods", APIVersion: "v1", Code: 200, Objects: -1, Bytes: -1, Weight: 1})
		}
	}
	r, err := p.Report("requests")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cap      int64
		min, max int
	}{{0, 100, 300}, {StormHeavyLevelSeats, StormHeavyLevelSeats, StormHeavyLevelSeats}} {
		s := Suggest(r, SuggestOptions{Margin: 0.2, HeavyLevelSeats: tc.cap})
		if len(s.Levels) != 1 {
			t.Fatalf("cap %d: %d levels, want the heavy lister's", tc.cap, len(s.Levels))
		}
		cfg := Builtin()
		cfg.Add(s.Schemas, s.Levels)
		if got := cfg.NominalSeats(DefaultServerSeats)[s.Levels[0].Name]; got < tc.min || got > tc.max {
			t.Errorf("cap %d: the heavy level has %d seats, want %d to %d (its storm peak %d)", tc.cap, got, tc.min, tc.max, r.Clients[0].PeakListSeats)
		}
	}
}
