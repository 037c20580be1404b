package trafficlog

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
	"time"
)

// BenchmarkLogWrite is the traffic log's cost per request: encoding a
// typical record and queueing it, with the writer goroutine writing the
// file (rotated) on the side.
func BenchmarkLogWrite(b *testing.B) {
	l := New(File(b.TempDir()+"/traffic.log", 100, 1))
	objects := int64(500)
	r := Record{Time: time.Now(), User: "system:serviceaccount:shop:web", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:shop", "system:authenticated"},
		UserAgent: "web/v1.2.3 (linux/amd64) kubernetes/abcdef", Verb: "list", APIVersion: "v1", Resource: "configmaps", Namespace: "shop",
		Code: 200, LatencyMillis: 12.345, ResponseBytes: 234567, Objects: &objects, Policy: "rampart-default", Verdict: VerdictAdmitted, SampleEvery: 1}
	b.ReportAllocs()
	for b.Loop() {
		l.Write(&r)
	}
	b.StopTimer()
	_ = l.Close()
	if d := l.Dropped.Load(); d > 0 {
		b.ReportMetric(float64(d)/float64(b.N), "dropped/op")
	}
}

// BenchmarkCountList is the cost of counting a LIST of 500 ConfigMaps
// (about 250 KB) as it streams, plain and gzip (the API server
// compresses it for clients that accept gzip).
func BenchmarkCountList(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`)
	for i := range 500 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"metadata":{"name":"bench-` + strings.Repeat("0", 3) + `","namespace":"t-bench","uid":"6f1c1a52-7c1e-4a43-9b0e-1b2b1c0d9e11","resourceVersion":"12345","creationTimestamp":"2026-11-22T08:00:00Z","labels":{"app":"bench"},"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-11-22T08:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:config":{}}}}]},"data":{"config":"` + strings.Repeat("x", 200) + `"}}`)
	}
	body.WriteString(`]}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(body.Bytes())
	_ = zw.Close()
	for _, c := range []struct {
		name, enc string
		data      []byte
	}{{"json", "", body.Bytes()}, {"json-gzip", "gzip", gz.Bytes()}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(body.Len()))
			for b.Loop() {
				var ct Counter
				ct.Start(false, "application/json", c.enc)
				for p := c.data; len(p) > 0; {
					k := min(len(p), 32*1024)
					ct.Write(p[:k])
					p = p[k:]
				}
				ct.End()
				if ct.Objects() != 500 {
					b.Fatal(ct.Objects())
				}
			}
		})
	}
}
