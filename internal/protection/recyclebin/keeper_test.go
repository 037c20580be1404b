package recyclebin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// fakeLiveness answers what a test says of each UID.
type fakeLiveness struct {
	mu    sync.Mutex
	state map[types.UID]string // "alive", "deleting"; absent: gone
	err   error
}

func (f *fakeLiveness) set(uid types.UID, s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == "" {
		delete(f.state, uid)
		return
	}
	f.state[uid] = s
}

func (f *fakeLiveness) alive(_ context.Context, _ schema.GroupVersionResource, _, _ string, uid types.UID) (bool, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, false, f.err
	}
	s, ok := f.state[uid]
	return ok, s == "deleting", nil
}

func newKeeper(t *testing.T) (*Keeper, *fakeLiveness, *clocktesting.FakeClock) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	live := &fakeLiveness{state: map[types.UID]string{}}
	k := &Keeper{Bin: &Bin{Store: storage.Dir{Root: t.TempDir()}}, Alive: live.alive, Clock: clock,
		Log: slog.New(slog.DiscardHandler), NotDeletedAfter: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k.Start(ctx, time.Hour)
	return k, live, clock
}

func capture(t *testing.T, k *Keeper, uid types.UID) string {
	t.Helper()
	name, err := k.Capture(context.Background(), Entry{Resource: configMaps, Kind: "ConfigMap", Namespace: "shop", Name: "prices-" + string(uid), UID: uid,
		DeletedBy: "alice", Object: json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// waitState steps the clock by step until the entry reaches want.
func waitState(t *testing.T, k *Keeper, clock *clocktesting.FakeClock, name, want string, step time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, err := k.Bin.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if e.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed %s, want %s", name, e.State, want)
		}
		clock.Step(step)
		time.Sleep(5 * time.Millisecond)
	}
}

func stateOf(t *testing.T, k *Keeper, name string) string {
	t.Helper()
	e, err := k.Bin.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return e.State
}

// A capture is stored before Capture returns, as Captured by the API, and
// settles as Deleted once the object is seen gone.
func TestKeeperSettlesAGoneObjectAsDeleted(t *testing.T) {
	k, _, clock := newKeeper(t)
	name := capture(t, k, "uid-gone")
	e, err := k.Bin.Get(context.Background(), name)
	if err != nil || e.State != StateCaptured || e.How != HowAPI || e.DeletedBy != "alice" || !e.DeletedAt.Equal(clock.Now()) {
		t.Fatalf("right after Capture: %+v, %v; want it stored as Captured by the API at the clock's time", e, err)
	}
	waitState(t, k, clock, name, StateDeleted, time.Second)
}

// An object still alive is not judged before NotDeletedAfter (another
// admission may still let its delete through), then marked NotDeleted.
func TestKeeperMarksAnObjectStillAliveAsNotDeleted(t *testing.T) {
	k, live, clock := newKeeper(t)
	live.set("uid-alive", "alive")
	name := capture(t, k, "uid-alive")
	for range 10 {
		clock.Step(5 * time.Second) // 50 s in all: under NotDeletedAfter
		time.Sleep(10 * time.Millisecond)
	}
	if s := stateOf(t, k, name); s != StateCaptured {
		t.Fatalf("50 s after the capture of a live object: %s, want still Captured", s)
	}
	waitState(t, k, clock, name, StateNotDeleted, 5*time.Second)
}

// A delete that waits for finalizers stays Captured while the object is
// being deleted, and is Deleted once it is gone.
func TestKeeperWaitsForFinalizers(t *testing.T) {
	k, live, clock := newKeeper(t)
	live.set("uid-fin", "deleting")
	name := capture(t, k, "uid-fin")
	for range 30 {
		clock.Step(5 * time.Second) // past NotDeletedAfter: deleting is not "alive"
		time.Sleep(5 * time.Millisecond)
	}
	if s := stateOf(t, k, name); s != StateCaptured {
		t.Fatalf("while its finalizers run: %s, want Captured", s)
	}
	live.set("uid-fin", "")
	waitState(t, k, clock, name, StateDeleted, 5*time.Second)
}

// A failing lookup leaves the capture Captured and is tried again.
func TestKeeperRetriesALookupThatFailed(t *testing.T) {
	k, live, clock := newKeeper(t)
	live.mu.Lock()
	live.err = errors.New("the API server is unreachable")
	live.mu.Unlock()
	name := capture(t, k, "uid-retry")
	for range 5 {
		clock.Step(5 * time.Second)
		time.Sleep(5 * time.Millisecond)
	}
	if s := stateOf(t, k, name); s != StateCaptured {
		t.Fatalf("with the API server unreachable: %s, want Captured", s)
	}
	live.mu.Lock()
	live.err = nil
	live.mu.Unlock()
	waitState(t, k, clock, name, StateDeleted, 5*time.Second)
}

// A store that cannot be written makes Capture fail with ErrStore (the
// webhook then refuses the delete), and keeps nothing.
func TestKeeperCaptureFailsWhenTheStoreCannotWrite(t *testing.T) {
	k, _, _ := newKeeper(t)
	root := k.Bin.Store.(storage.Dir).Root
	// entries/shop is a file: nothing can be written below it.
	if err := os.MkdirAll(filepath.Join(root, "entries"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "entries", "shop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := k.Capture(context.Background(), Entry{Resource: configMaps, Namespace: "shop", Name: "prices", UID: "u", Object: json.RawMessage(`{}`)})
	if !errors.Is(err, ErrStore) {
		t.Fatalf("Capture on a broken store: %v, want ErrStore", err)
	}
	// A Secret without a key is refused the same way.
	_, err = k.Capture(context.Background(), Entry{Resource: secrets, Namespace: "other", Name: "tls", UID: "s", Object: json.RawMessage(`{}`)})
	if !errors.Is(err, ErrStore) || !errors.Is(err, ErrNoKey) {
		t.Fatalf("Capture of a Secret with no key: %v, want ErrStore and ErrNoKey", err)
	}
	if l, _ := k.Bin.List(context.Background(), ""); len(l) != 0 {
		t.Fatalf("the bin holds %v after failed captures, want nothing", l)
	}
}

// Captures a stopped replica left unsettled are settled by the next start.
func TestKeeperResumesCapturesLeftUnsettled(t *testing.T) {
	dir := t.TempDir()
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	bin := &Bin{Store: storage.Dir{Root: dir}}
	old := Entry{Resource: configMaps, Namespace: "shop", Name: "left", UID: "uid-left", DeletedAt: clock.Now().Add(-time.Minute),
		How: HowAPI, State: StateCaptured, Object: json.RawMessage(`{}`)}
	name, err := bin.Put(context.Background(), old)
	if err != nil {
		t.Fatal(err)
	}
	live := &fakeLiveness{state: map[types.UID]string{}}
	k := &Keeper{Bin: bin, Alive: live.alive, Clock: clock, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k.Start(ctx, time.Hour)
	waitState(t, k, clock, name, StateDeleted, time.Second)
}

// One object version is kept once, however many webhooks capture it at
// once (a protected object a RecyclePolicy selects too) or again (the API
// server's retry); a later version is kept again.
func TestKeeperKeepsOneCopyPerObjectVersion(t *testing.T) {
	k, _, clock := newKeeper(t)
	version := func(rv string) Entry {
		return Entry{Resource: configMaps, Namespace: "shop", Name: "prices", UID: "uid-1",
			Object: json.RawMessage(`{"metadata":{"name":"prices","resourceVersion":"` + rv + `"}}`)}
	}
	var wg sync.WaitGroup
	names := make([]string, 4)
	for i := range names {
		wg.Go(func() {
			name, err := k.Capture(context.Background(), version("7"))
			if err != nil {
				t.Error(err)
			}
			names[i] = name
		})
	}
	wg.Wait()
	if l, _ := k.Bin.List(context.Background(), ""); len(l) != 1 {
		t.Fatalf("four captures of one version kept %d copies, want 1", len(l))
	}
	for _, n := range names {
		if n != names[0] {
			t.Fatalf("captures of one version answered %v, want one name", names)
		}
	}
	clock.Step(time.Millisecond)
	if _, err := k.Capture(context.Background(), version("8")); err != nil {
		t.Fatal(err)
	}
	if l, _ := k.Bin.List(context.Background(), ""); len(l) != 2 {
		t.Fatalf("a second version: %d copies, want 2", len(l))
	}
}

// Captured answers for the objects this keeper stored a copy of in the
// last two minutes, and no others.
func TestKeeperSaysWhatItCapturedLately(t *testing.T) {
	k, _, clock := newKeeper(t)
	capture(t, k, "uid-kept")
	if !k.Captured("uid-kept") || k.Captured("uid-other") {
		t.Fatalf("right after a capture: kept %v, other %v; want true, false", k.Captured("uid-kept"), k.Captured("uid-other"))
	}
	clock.Step(recentFor)
	if k.Captured("uid-kept") {
		t.Fatal("two minutes later: still captured lately; want the store to answer")
	}
}
