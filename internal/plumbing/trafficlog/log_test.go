package trafficlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// stalledDisk blocks every write until released.
type stalledDisk struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (d *stalledDisk) Write(p []byte) (int, error) {
	<-d.release
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.buf.Write(p)
}

// A disk that stops never holds the gateway's requests: records beyond
// the queue are dropped and counted, the rest written once it is back,
// every one a JSON line of kind RampartTraffic.
func TestLogDropsRatherThanWaitsForTheDisk(t *testing.T) {
	d := &stalledDisk{release: make(chan struct{})}
	l := New(d)
	total := QueueLength * 3
	start := time.Now()
	for i := range total {
		l.Write(&Record{User: "u", Verb: "get", Code: 200, Time: start.Add(time.Duration(i))})
	}
	if l.Dropped.Load() == 0 {
		t.Fatalf("%d records written to a stalled disk, none dropped", total)
	}
	close(d.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Write(&Record{User: "after-close"}) // ignored, no panic
	lines := strings.Split(strings.TrimSpace(d.buf.String()), "\n")
	if int64(len(lines)) != l.Written.Load() || l.Written.Load()+l.Dropped.Load() != int64(total) {
		t.Fatalf("%d lines, %d written, %d dropped of %d", len(lines), l.Written.Load(), l.Dropped.Load(), total)
	}
	for _, line := range lines {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Kind != Kind || r.User != "u" {
			t.Fatalf("line %q: %v", line, err)
		}
	}
}
