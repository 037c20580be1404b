package recyclebin

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// Retention evicts what is older than its policy keeps, a size cap the
// oldest of its policy's copies, a policy that is gone falls back to the
// default; the summary counts what is left.
func TestMaintainerEvictsByRetentionAndSize(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	bin := &Bin{Store: storage.Dir{Root: t.TempDir()}}
	put := func(name, policy string, age time.Duration, state string, size int) {
		t.Helper()
		e := Entry{Resource: configMaps, Kind: "ConfigMap", Namespace: "shop", Name: name, UID: types.UID("uid-" + name),
			DeletedAt: now.Add(-age), How: HowAPI, State: state, Policy: policy,
			Object: json.RawMessage(`{"data":"` + strings.Repeat("x", size) + `"}`)}
		if _, err := bin.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	put("protected-old", "", 40*24*time.Hour, StateDeleted, 10)          // past the default 30 days
	put("protected-new", "", time.Hour, StateDeleted, 10)                // kept
	put("short-old", "short", 2*time.Hour, StateDeleted, 10)             // past 1h
	put("short-new", "short", time.Minute, StateNotDeleted, 10)          // kept
	put("capped-1", "capped", 3*time.Hour, StateDeleted, 2000)           // oldest: over the cap
	put("capped-2", "capped", 2*time.Hour, StateDeleted, 2000)           // kept
	put("capped-3", "capped", time.Hour, StateCaptured, 2000)            // kept
	put("gone-old", "deleted-policy", 31*24*time.Hour, StateDeleted, 10) // default applies
	m := &Maintainer{Bin: bin, Clock: clocktesting.NewFakeClock(now), Log: slog.New(slog.DiscardHandler),
		Default: Limits{Retention: 30 * 24 * time.Hour},
		LimitsOf: func(policy string) (Limits, bool) {
			switch policy {
			case "short":
				return Limits{Retention: time.Hour}, true
			case "capped":
				return Limits{Retention: 24 * time.Hour, MaxBytes: 5000}, true
			}
			return Limits{}, false
		}}
	s, err := m.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed, _ := bin.List(ctx, "")
	var left []string
	for _, l := range listed {
		left = append(left, l.Name)
	}
	want := "capped-2 capped-3 protected-new short-new"
	slices.Sort(left)
	if strings.Join(left, " ") != want {
		t.Fatalf("left %v, want %s", left, want)
	}
	if s.Entries != 4 || s.Evicted[EvictedRetention] != 3 || s.Evicted[EvictedSize] != 1 ||
		s.ByState[StateDeleted] != 2 || s.ByState[StateNotDeleted] != 1 || s.ByState[StateCaptured] != 1 || s.ByHow[HowAPI] != 4 ||
		!s.Newest.Equal(now.Add(-time.Minute)) {
		t.Errorf("summary %+v", s)
	}
	// A second pass reads nothing new and evicts nothing more.
	s2, err := m.Pass(ctx)
	if err != nil || s2.Entries != 4 || len(s2.Evicted) != 0 || s2.Bytes != s.Bytes {
		t.Errorf("second pass: %+v, %v", s2, err)
	}
}
