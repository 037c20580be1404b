package trafficprofile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// FuzzScanAuditLine: the hand-written scanner never panics on a line, and
// where encoding/json reads a line into the audit types without error,
// the scanner reads the same fields a profile uses. Seeds: the real audit
// lines of testdata.
func FuzzScanAuditLine(f *testing.F) {
	data, err := os.ReadFile(realLog)
	if err != nil {
		f.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 0; sc.Scan() && n < 40; n++ {
		f.Add(bytes.Clone(sc.Bytes()))
	}
	f.Add([]byte(`{"kind":"Event","user":{"username":"a\u0000\"b"},"objectRef":null,"responseObject":{"items":[{"x":"]}"}]}}`))
	// Keys in another case: encoding/json matches them (CI found these).
	f.Add([]byte("{\"\u212aind\":\"Event\",\"reqUestReceivedTimestamp\":\"2026-11-23T20:48:56.490719Z\"}"))
	f.Add([]byte(`{"RequestURI":"/api/v1/pods","verb":"list"}`))
	f.Add([]byte(`{"Kind":"Event","reqUestReceivedTimestamp":"2026-11-23T20:48:56.490719Z"}`))
	s := newScanner()
	f.Fuzz(func(t *testing.T, line []byte) {
		var got auditv1.Event
		scanErr := s.event(line, &got)
		var want auditv1.Event
		if err := json.Unmarshal(line, &want); err != nil || scanErr != nil {
			return // the decoder refuses it, or the scanner does: no claim
		}
		if w, g := read(&want), read(&got); !reflect.DeepEqual(w, g) {
			t.Errorf("decoder %v\nscanner %v\nline %q", w, g, line)
		}
	})
}
