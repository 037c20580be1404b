package changewindow

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
)

// FuzzCompileWindow feeds arbitrary ChangeWindow specs (as the API would
// decode them) and instants to Compile, Open, Next and Decide: a spec is
// compiled or rejected with an error, never a panic, and a compiled window
// answers in bounded time; a closed window allows no guarded change
// without an override.
func FuzzCompileWindow(f *testing.F) {
	for _, s := range []string{
		`{"timeZone":"Europe/Paris","schedules":[{"days":["Mon","Tue"],"start":"22:00","end":"02:00"}]}`,
		`{"schedules":[{"cron":"*/15 3 * * 1-5","duration":"10m"},{"cron":"0 0 30 2 *","duration":"1h"}]}`,
		`{"schedules":[{"cron":"@hourly","duration":"1m"}],"freezes":[{"start":"2026-11-01T00:00:00Z","end":"2026-12-01T00:00:00Z","reason":"peak"}]}`,
		`{"timeZone":"America/New_York","schedules":[{"days":["Sun"],"start":"01:30","end":"03:30"}]}`,
		`{"schedules":[{"cron":"59 23 31 12 *","duration":"720h"}]}`,
		`{"schedules":[{"days":["Mon"],"start":"24:00","end":"-1:00"}]}`,
		`{"timeZone":"../../etc/passwd","schedules":[]}`,
	} {
		f.Add([]byte(s), int64(1795000000))
	}
	f.Fuzz(func(t *testing.T, spec []byte, unix int64) {
		var s v1alpha1.ChangeWindowSpec
		if json.Unmarshal(spec, &s) != nil {
			return
		}
		now := time.Unix(unix%(1<<34), 0).UTC()
		w, err := Compile(s, now)
		if err != nil {
			return
		}
		open, _ := w.Open(now)
		w.Next(now)
		v := Decide(Request{Object: protection.Object{Name: "web"}, Window: "w", Changed: []string{"spec.replicas"}}, w, now)
		if v.Allowed != open {
			t.Fatalf("window open=%v but a guarded change got allowed=%v", open, v.Allowed)
		}
	})
}

// FuzzChangedFields: for any field paths and objects, Changed never
// panics, finds nothing changed between an object and itself, and finds
// a change of any guarded leaf it can reach.
func FuzzChangedFields(f *testing.F) {
	f.Add(`{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"a","image":"x:1"},{"name":"b","image":"y:1"}]}}}}`,
		`{"spec":{"replicas":4,"template":{"spec":{"containers":[{"name":"a","image":"x:2"}]}}}}`,
		"spec.template.spec.containers[*].image")
	f.Add(`{"metadata":{"labels":{"a.b/c":"1"}}}`, `{"metadata":{"labels":{}}}`, "metadata.labels")
	f.Add(`{"a":[[1,2],[3]]}`, `{"a":[[1],[3,4]]}`, "a[*][*]")
	f.Add(`{"a":{"b":1}}`, `{"a":[1]}`, "a[0].b[")
	f.Add(`{}`, `{"x":null}`, "x..y[*]]")
	f.Fuzz(func(t *testing.T, oldJSON, curJSON, path string) {
		var old, cur map[string]any
		if json.Unmarshal([]byte(oldJSON), &old) != nil || json.Unmarshal([]byte(curJSON), &cur) != nil {
			return
		}
		paths := []string{path, "spec.replicas"}
		if got := Changed(old, old, paths); len(got) != 0 {
			t.Fatalf("Changed(%s, itself, %q) = %q", oldJSON, paths, got)
		}
		Changed(old, cur, paths)
		Changed(cur, nil, paths)
	})
}
