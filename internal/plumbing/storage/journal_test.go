package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openJournaled(t *testing.T, root string) *Journaled {
	t.Helper()
	j, err := OpenJournaled(context.Background(), Dir{Root: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func readAll(t *testing.T, s Store, name string) string {
	t.Helper()
	r, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func wals(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, journalDir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// What a process journaled and a crash kept from the Dir is stored at the
// next open, up to a record the crash cut short; what the Dir has already
// is left as it is; the journal is removed.
func TestJournalReplaysWhatACrashLeft(t *testing.T) {
	root := t.TempDir()
	d := Dir{Root: root}
	if _, err := d.Put(context.Background(), "entries/a", strings.NewReader("stored before")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, journalDir), 0o700); err != nil {
		t.Fatal(err)
	}
	var wal bytes.Buffer
	wal.Write(encodeRecord("entries/a", []byte("journaled")))
	wal.Write(encodeRecord("entries/b", []byte("only journaled")))
	torn := encodeRecord("entries/c", []byte("cut short"))
	wal.Write(torn[:len(torn)-3])
	wal.Write(make([]byte, 100))
	crashed := filepath.Join(root, journalDir, "1-1.wal")
	if err := os.WriteFile(crashed, wal.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// A reader of the folder sees what is journaled before it is stored.
	if got := readAll(t, d, "entries/b"); got != "only journaled" {
		t.Errorf("entries/b read from the folder before the replay: %q", got)
	}
	if list, err := d.List(context.Background(), "entries/"); err != nil || len(list) != 2 || list[0].SHA256 != sha256Hex([]byte("stored before")) {
		t.Errorf("listed before the replay %+v, %v; want entries/a as stored and entries/b from the journal", list, err)
	}
	j := openJournaled(t, root)
	if got := readAll(t, d, "entries/b"); got != "only journaled" {
		t.Errorf("entries/b after replay: %q", got)
	}
	if got := readAll(t, d, "entries/a"); got != "stored before" {
		t.Errorf("entries/a after replay: %q, want the stored copy left alone", got)
	}
	if _, err := d.Get(context.Background(), "entries/c"); err == nil {
		t.Error("entries/c, cut short, was stored")
	}
	if _, err := os.Stat(crashed); !os.IsNotExist(err) {
		t.Errorf("the replayed journal is still there: %v", err)
	}
	if list, err := j.List(context.Background(), ""); err != nil || len(list) != 2 {
		t.Errorf("listed %v, %v; want entries/a and entries/b (no journal file)", list, err)
	}
}

// A journal another running process holds is not replayed (nor removed).
func TestJournalLeavesARunningProcessesJournalAlone(t *testing.T) {
	root := t.TempDir()
	first := openJournaled(t, root)
	if _, err := first.Put(context.Background(), "entries/x", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	held := wals(t, root)
	second := openJournaled(t, root)
	for _, f := range held {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the second process removed the first's journal %s: %v", f, err)
		}
	}
	if got := readAll(t, second, "entries/x"); got != "x" {
		t.Errorf("entries/x through the second: %q", got)
	}
}

// What another running process journaled and has not stored in the Dir
// yet reads through this one too: its journal is locked, so neither
// taken over nor stored here, and the object is in neither the Dir nor
// this process's memory.
func TestJournalReadsWhatARunningProcessHasNotStoredYet(t *testing.T) {
	root := t.TempDir()
	j := openJournaled(t, root)
	theirs := filepath.Join(root, journalDir, "1-1.wal")
	f, err := os.OpenFile(theirs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(encodeRecord("entries/theirs", []byte("theirs"))); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, j, "entries/theirs"); got != "theirs" {
		t.Errorf("entries/theirs through this process: %q", got)
	}
}

// A running process stores what the journal of a process that ended (a
// replica killed) left, without waiting for a start.
func TestJournalAdoptsWhatAnEndedProcessLeft(t *testing.T) {
	defer func(d time.Duration) { adoptEvery = d }(adoptEvery)
	adoptEvery = 50 * time.Millisecond
	root := t.TempDir()
	j := openJournaled(t, root)
	left := filepath.Join(root, journalDir, "2-2.wal")
	if err := os.WriteFile(left, encodeRecord("entries/orphan", []byte("kept")), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(left); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ended process's journal was not taken over within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := readAll(t, Dir{Root: root}, "entries/orphan"); got != "kept" {
		t.Errorf("entries/orphan: %q", got)
	}
	if _, err := j.Put(context.Background(), "entries/mine", strings.NewReader("mine")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * adoptEvery) // our own journal is never taken for an ended one's
	if n := len(wals(t, root)); n != 1 {
		t.Errorf("%d journals, want ours alone", n)
	}
}

// Objects are readable and listed as soon as Put returns, end up in the
// Dir, and the journal holds nothing once they are: concurrent Puts, one
// deleted before it reached the Dir, and records over several journals.
func TestJournalStoresEveryObjectInTheDir(t *testing.T) {
	root := t.TempDir()
	j := openJournaled(t, root)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			name := fmt.Sprintf("entries/ns/cm-%02d", i)
			if _, err := j.Put(ctx, name, strings.NewReader(name)); err != nil {
				t.Error(err)
				return
			}
			if got := readAll(t, j, name); got != name {
				t.Errorf("%s read back right after Put: %q", name, got)
			}
		})
	}
	wg.Wait()
	if _, err := j.Put(ctx, "entries/ns/gone", strings.NewReader("gone")); err != nil {
		t.Fatal(err)
	}
	if err := j.Delete(ctx, "entries/ns/gone"); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("b"), segmentSize/3)
	for i := range 4 { // more than one journal's worth
		if _, err := j.Put(ctx, fmt.Sprintf("entries/big-%d", i), bytes.NewReader(big)); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := j.Flush(fctx); err != nil {
		t.Fatal(err)
	}
	d := Dir{Root: root}
	list, err := d.List(ctx, "entries/")
	if err != nil || len(list) != 44 {
		t.Fatalf("the Dir lists %d objects (%v), want 40 + 4", len(list), err)
	}
	if got := readAll(t, d, "entries/ns/cm-07"); got != "entries/ns/cm-07" {
		t.Errorf("entries/ns/cm-07 in the Dir: %q", got)
	}
	if _, err := d.Get(ctx, "entries/ns/gone"); err == nil {
		t.Error("an object deleted before it was stored reached the Dir")
	}
	if n := len(wals(t, root)); n != 1 {
		t.Errorf("%d journals after the flush, want only the active one", n)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(wals(t, root)); n != 0 {
		t.Errorf("%d journals after Close with everything stored, want none", n)
	}
}

// Replicas sharing a folder start at once: none takes another's journal,
// half made, for one a crash left (each must open).
func TestJournalsOpenedAtOnceAllStart(t *testing.T) {
	root := t.TempDir()
	for range 20 {
		var wg sync.WaitGroup
		js := make([]*Journaled, 4)
		for i := range js {
			wg.Go(func() {
				j, err := OpenJournaled(context.Background(), Dir{Root: root}, nil)
				if err != nil {
					t.Errorf("open %d: %v", i, err)
					return
				}
				js[i] = j
			})
		}
		wg.Wait()
		for _, j := range js {
			if j != nil {
				j.Close()
			}
		}
		if t.Failed() {
			return
		}
	}
}
