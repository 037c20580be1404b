package trafficprofile

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// auditLine is an audit event of a GET of pods sent by user, impersonating
// as when as is not empty.
func auditLine(at time.Time, user, as, agent string) string {
	imp := ""
	if as != "" {
		imp = fmt.Sprintf(`"impersonatedUser":{"username":%q,"groups":["system:authenticated"]},`, as)
	}
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/a/pods","verb":"list","user":{"username":%q,"groups":["system:authenticated"]},%s"userAgent":%q,"objectRef":{"resource":"pods","namespace":"a","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`+"\n",
		user, imp, agent, at.Format(time.RFC3339Nano), at.Add(20*time.Millisecond).Format(time.RFC3339Nano))
}

// A proxy that impersonates its users (kubectl --as, Teleport) is
// profiled as the users it impersonates, each shown with the proxy; the
// TrafficPolicies suggested for them match them as the gateway sees them
// (the proxy, narrowed to the impersonated user) and come before the
// proxy's own, which would otherwise hold them.
func TestImpersonatedClientsAreProfiledAsWhomTheAPIServerAuthorised(t *testing.T) {
	start := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var log strings.Builder
	for i := range 30 {
		at := start.Add(time.Duration(i) * 100 * time.Millisecond)
		log.WriteString(auditLine(at, "teleport", "alice", "kubectl/v1.36.3"))
		if i%3 == 0 {
			log.WriteString(auditLine(at, "teleport", "bob", "kubectl/v1.36.3"))
			log.WriteString(auditLine(at, "teleport", "", "teleport/17"))
		}
	}
	r, _ := profileOf(t, []byte(log.String()), 0)
	got := map[string]int64{}
	for _, c := range r.Clients {
		got[c.Name()] = c.Requests
	}
	want := map[string]int64{"alice (kubectl/v1.36.3) via teleport": 30, "bob (kubectl/v1.36.3) via teleport": 10, "teleport (teleport/17)": 10}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("clients %v, want %v", got, want)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, r, 10); err != nil || !strings.Contains(table.String(), "alice (kubectl/v1.36.3) via teleport") {
		t.Errorf("table (%v):\n%s", err, table.String())
	}

	var b bytes.Buffer
	if err := WritePolicies(&b, Suggest(r, SuggestOptions{Margin: 0.2})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "impersonated:\n      users:\n      - alice") {
		t.Errorf("no policy matches alice as impersonated by teleport:\n%s", b.String())
	}
	ps, err := ReadPolicies(b.Bytes(), "suggested.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rp := NewReplay(ps)
	if _, err := Read(strings.NewReader(log.String()), "test", 0, rp.Add); err != nil {
		t.Fatal(err)
	}
	res := rp.Result()
	matched := map[string]int64{}
	for _, p := range res.Policies {
		matched[p.Policy] = p.Matched
	}
	// Each client's requests land on its own policy: alice's and bob's
	// are not held by teleport's.
	if res.Refused != 0 || matched["suggested-alice-0-lists"] != 30 || matched["suggested-bob-1-lists"] != 10 || matched["suggested-teleport-2-lists"] != 10 {
		t.Errorf("replay: %d refused, matched %v\n%s", res.Refused, matched, b.String())
	}

	// Behind Rampart's gateway, which impersonates every client it
	// forwards, the gateway's policies see the client itself.
	gw := Suggest(r, SuggestOptions{Gateways: []string{"teleport"}})
	for _, p := range gw {
		for _, m := range p.Spec.Match {
			if m.Impersonated != nil {
				t.Errorf("policy %s matches an impersonated user behind a gateway", p.Name)
			}
		}
	}
}
