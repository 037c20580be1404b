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

// read is what the profile reads of an event.
func read(ev *auditv1.Event) map[string]any {
	m := map[string]any{
		"kind": ev.Kind, "stage": ev.Stage, "uri": ev.RequestURI, "verb": ev.Verb,
		"user": ev.User.Username, "groups": ev.User.Groups, "agent": ev.UserAgent,
		"received": ev.RequestReceivedTimestamp.UTC(), "stage time": ev.StageTimestamp.UTC(),
	}
	if r := ev.ObjectRef; r != nil {
		m["ref"] = [6]string{r.Resource, r.Namespace, r.Name, r.APIGroup, r.APIVersion, r.Subresource}
	}
	if u := ev.ImpersonatedUser; u != nil {
		m["impersonated"] = [2]any{u.Username, u.Groups}
	}
	if ev.ResponseStatus != nil {
		m["code"] = ev.ResponseStatus.Code
	}
	if ev.ResponseObject != nil {
		m["items"] = countItems(ev.ResponseObject.Raw)
	}
	return m
}

// TestScannerAgreesWithTheDecoder reads every real line of testdata, and
// lines with escapes, nulls and an answer body, with the scanner and with
// encoding/json into the audit types: the fields a profile reads agree.
func TestScannerAgreesWithTheDecoder(t *testing.T) {
	data, err := os.ReadFile(realLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := [][]byte{
		[]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Response","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/a/pods?labelSelector=app%3D%22x%22","verb":"list","user":{"username":"dev\"ops\\team","groups":["a","b\u00e9"]},"userAgent":"curl/8 \"quoted\"","objectRef":{"resource":"pods","namespace":"a","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"responseObject":{"kind":"PodList","items":[{"a":"}]"},{"b":[1,{"c":"\\"}]}]},"requestReceivedTimestamp":"2026-11-23T20:48:56.478920Z","stageTimestamp":"2026-11-23T21:48:56.000001+01:00","annotations":{"k":"v \"q\""}}`),
		[]byte(`{"kind":"Event","stage":"ResponseComplete","verb":"get","user":{"username":"proxy","groups":["system:authenticated"]},"impersonatedUser":{"username":"alice","groups":["dev","system:authenticated"]},"requestReceivedTimestamp":"2026-11-23T20:48:56.000000Z"}`),
		[]byte(`{"kind":"Event","stage":"ResponseComplete","verb":"get","user":{"username":"proxy"},"impersonatedUser":null,"requestReceivedTimestamp":"2026-11-23T20:48:56.000000Z"}`),
		[]byte(` { "kind" : "Event" , "stage":"Panic", "verb":"get", "user":{"username":"x","groups":null}, "objectRef":null, "responseStatus":{"code":500 }, "requestReceivedTimestamp":"2026-11-23T20:48:56.000000Z", "stageTimestamp":null } `),
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	s := newScanner()
	for i, line := range lines {
		var want, got auditv1.Event
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if err := s.event(line, &got); err != nil {
			t.Fatalf("line %d: the scanner: %v\n%s", i, err, line)
		}
		if w, g := read(&want), read(&got); !reflect.DeepEqual(w, g) {
			t.Errorf("line %d:\n decoder %v\n scanner %v", i, w, g)
		}
	}
	if n := read(&auditv1.Event{ResponseObject: nil}); n["items"] != nil {
		t.Fatal("no answer, no items")
	}
	for _, bad := range []string{`{"kind":"Event","verb":}`, `{"kind":"Event"`, `not json`, `{"user":{"username":"x"}`} {
		var ev auditv1.Event
		if err := s.event([]byte(bad), &ev); err == nil {
			t.Errorf("%s: read without error", bad)
		}
	}
}
