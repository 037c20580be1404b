package trafficprofile

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkProfileRealAuditLog profiles the real audit lines of testdata
// (repeated to 16 MiB) on one worker: bytes/s is the profile's throughput
// per core. hack/traffic-profile-bench.sh measures a whole run against jq.
func BenchmarkProfileRealAuditLog(b *testing.B) {
	line, err := os.ReadFile(realLog)
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat(line, (16<<20)/len(line)+1)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		p := NewProfiler()
		if _, err := Read(bytes.NewReader(data), "bench", 1, p.Add); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Report("server-time"); err != nil {
			b.Fatal(err)
		}
	}
}
