package recyclebin

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A namespace's contents are kept up to the cap, each object counted once
// however often it is asked about; past the cap, or after repeated store
// failures, the rest goes without a copy and only the first is reported;
// each namespace has its own cap, and a namespace deleted again much later
// starts afresh.
func TestNamespaceContentsKeptUpToTheCap(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	type take struct {
		ns     string
		uid    types.UID
		size   int64
		after  time.Duration
		failed bool // the capture failed after Take
		reason string
		first  bool
	}
	for _, tc := range []struct {
		name  string
		takes []take
	}{
		{"within the cap", []take{{"shop", "a", 40, 0, false, "", false}, {"shop", "b", 60, 0, false, "", false}}},
		{"past the cap", []take{
			{"shop", "a", 60, 0, false, "", false},
			{"shop", "b", 60, 0, false, NotKeptCap, true},
			{"shop", "c", 50, 0, false, NotKeptCap, false},
			{"shop", "d", 40, 0, false, "", false}, // still fits
		}},
		{"asked again", []take{{"shop", "a", 60, 0, false, "", false}, {"shop", "a", 60, 0, false, "", false}, {"shop", "b", 40, 0, false, "", false}}},
		{"each namespace its own", []take{{"shop", "a", 100, 0, false, "", false}, {"bank", "b", 100, 0, false, "", false}}},
		{"a failed copy gives its bytes back", []take{{"shop", "a", 100, 0, true, "", false}, {"shop", "b", 100, 0, false, "", false}}},
		{"the store failing thrice ends keeping", []take{
			{"shop", "a", 1, 0, true, "", false}, {"shop", "b", 1, 0, true, "", false}, {"shop", "c", 1, 0, true, "", false},
			{"shop", "d", 1, 0, false, NotKeptStore, true},
			{"bank", "e", 1, 0, false, "", false},
		}},
		{"forgotten after a while", []take{{"shop", "a", 100, 0, false, "", false}, {"shop", "b", 100, time.Hour, false, "", false}}},
		{"nothing with a zero cap", []take{{"shop", "a", 1, 0, false, NotKeptCap, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &NamespaceContents{Max: 100}
			if tc.name == "nothing with a zero cap" {
				c.Max = 0
			}
			now := at
			for i, tk := range tc.takes {
				now = now.Add(tk.after)
				reason, first := c.Take(tk.ns, tk.uid, tk.size, now)
				if reason != tk.reason || first != tk.first {
					t.Fatalf("take %d (%s/%s, %d bytes): reason %q first %v, want %q %v", i, tk.ns, tk.uid, tk.size, reason, first, tk.reason, tk.first)
				}
				if tk.failed {
					c.Failed(tk.ns, tk.uid, now)
				}
			}
		})
	}
}
