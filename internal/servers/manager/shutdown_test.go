package manager

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// Told to stop, the manager is unready at once and keeps serving for the
// delay; with no delay it stops at once.
func TestDelayStop(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	stopping := new(atomic.Bool)
	ctx := delayStop(parent, 300*time.Millisecond, stopping, logr.Discard())
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for !stopping.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !stopping.Load() {
		t.Fatal("not unready after the stop")
	}
	if ctx.Err() != nil {
		t.Fatal("stopped serving before the delay")
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("still serving long after the delay")
	}
	parent2, stop2 := context.WithCancel(context.Background())
	if ctx := delayStop(parent2, 0, new(atomic.Bool), logr.Discard()); ctx != parent2 {
		t.Fatal("no delay must be the context itself")
	}
	stop2()
}
