package storage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// subject is a store under test, empty, with a way to damage it.
type subject struct {
	store storage.Store
	// corrupt replaces name's content behind the store's back, keeping
	// the checksum the store recorded.
	corrupt func(t *testing.T, name string, content []byte)
}

// testStore runs the behaviour every Store must have; open gives each
// subtest a new empty store.
func testStore(t *testing.T, open func(t *testing.T) subject) {
	ctx := context.Background()
	t.Run("RoundTrip", func(t *testing.T) {
		s := open(t).store
		before := time.Now().Add(-time.Minute)
		o, err := s.Put(ctx, "etcd/a.db", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		// sha256("hello")
		if o.Name != "etcd/a.db" || o.Size != 5 || o.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" || o.Modified.Before(before) {
			t.Fatalf("object %+v", o)
		}
		if got := read(t, s, "etcd/a.db"); got != "hello" {
			t.Fatalf("read %q", got)
		}
		// Neither seekable nor empty readers trip it.
		if _, err := s.Put(ctx, "empty", strings.NewReader("")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, s, "empty"); got != "" {
			t.Fatalf("empty object read as %q", got)
		}
		if _, err := s.Put(ctx, "streamed", io.MultiReader(strings.NewReader("hel"), strings.NewReader("lo"))); err != nil {
			t.Fatal(err)
		}
		if got := read(t, s, "streamed"); got != "hello" {
			t.Fatalf("streamed object read as %q", got)
		}
		// Lazily or not, an object reads back the same (a store without a
		// lazy put puts it durably).
		if o, err := storage.PutLazily(ctx, s, "etcd/lazy", strings.NewReader("hello")); err != nil || o.Size != 5 || o.SHA256 != sum("hello") {
			t.Fatalf("lazy put: %+v, %v", o, err)
		}
		if got := read(t, s, "etcd/lazy"); got != "hello" {
			t.Fatalf("lazily stored object read as %q", got)
		}
		// The name is cleaned as a path: a/../b is b.
		if _, err := s.Put(ctx, "x/../y//z", strings.NewReader("z")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, s, "y/z"); got != "z" {
			t.Fatalf("y/z read as %q", got)
		}
	})

	t.Run("ListByPrefixInOrder", func(t *testing.T) {
		s := open(t).store
		for _, name := range []string{"b/2", "a/2", "ab", "a/10", "a/1", "c"} {
			if _, err := s.Put(ctx, name, strings.NewReader("content of "+name)); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.List(ctx, "a/")
		if err != nil {
			t.Fatal(err)
		}
		if got := names(list); got != "a/1 a/10 a/2" {
			t.Fatalf("List(a/) = %s", got)
		}
		for _, o := range list {
			want := "content of " + o.Name
			if o.Size != int64(len(want)) || o.SHA256 != sum(want) || o.Modified.IsZero() {
				t.Errorf("listed %+v, want size %d and SHA-256 %s", o, len(want), sum(want))
			}
		}
		if list, err := s.List(ctx, "a"); err != nil || names(list) != "a/1 a/10 a/2 ab" {
			t.Fatalf("List(a) = %s, %v", names(list), err)
		}
		if list, err := s.List(ctx, ""); err != nil || names(list) != "a/1 a/10 a/2 ab b/2 c" {
			t.Fatalf("List() = %s, %v", names(list), err)
		}
		if list, err := s.List(ctx, "none/"); err != nil || len(list) != 0 {
			t.Fatalf("List(none/) = %s, %v", names(list), err)
		}
	})

	t.Run("AtomicOverwrite", func(t *testing.T) {
		s := open(t).store
		v1, v2 := strings.Repeat("1", 300<<10), strings.Repeat("2", 200<<10)
		if _, err := s.Put(ctx, "snap", strings.NewReader(v1)); err != nil {
			t.Fatal(err)
		}
		// A reader opened before the overwrite gets the old object whole,
		// or an error; never a mix.
		early, err := s.Get(ctx, "snap")
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 10)
		if _, err := io.ReadFull(early, head); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, "snap", strings.NewReader(v2)); err != nil {
			t.Fatal(err)
		}
		if rest, err := io.ReadAll(early); err == nil && string(head)+string(rest) != v1 {
			t.Errorf("a reader opened before the overwrite read %d bytes that are not the old object", len(head)+len(rest))
		}
		early.Close()
		if got := read(t, s, "snap"); got != v2 {
			t.Fatalf("after the overwrite read %d bytes, want the new %d", len(got), len(v2))
		}
		if list, err := s.List(ctx, ""); err != nil || len(list) != 1 || list[0].Size != int64(len(v2)) || list[0].SHA256 != sum(v2) {
			t.Fatalf("after the overwrite listed %+v, %v", list, err)
		}
		// A failed Put leaves the old object as it was, and stores no
		// new one.
		broken := io.MultiReader(strings.NewReader("partial"), errReader{})
		if _, err := s.Put(ctx, "snap", broken); err == nil {
			t.Fatal("Put of a failing reader succeeded")
		}
		if _, err := s.Put(ctx, "new", io.MultiReader(strings.NewReader("partial"), errReader{})); err == nil {
			t.Fatal("Put of a failing reader succeeded")
		}
		if got := read(t, s, "snap"); got != v2 {
			t.Fatalf("after a failed overwrite read %d bytes, want the %d before", len(got), len(v2))
		}
		if list, _ := s.List(ctx, ""); names(list) != "snap" {
			t.Fatalf("after failed Puts listed %s", names(list))
		}
		// Readers racing overwrites: whatever a reader gets without an
		// error is one version, whole.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Go(func() {
			defer close(stop)
			for i := range 20 {
				if _, err := s.Put(ctx, "snap", strings.NewReader([]string{v1, v2}[i%2])); err != nil {
					t.Error(err)
					return
				}
			}
		})
		whole, failed := 0, 0
		for done := false; !done; {
			select {
			case <-stop:
				done = true
			default:
			}
			r, err := s.Get(ctx, "snap")
			if err != nil {
				failed++
				continue
			}
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				failed++
				continue
			}
			if string(b) != v1 && string(b) != v2 {
				t.Fatalf("a reader racing overwrites read %d bytes that are neither version", len(b))
			}
			whole++
		}
		wg.Wait()
		t.Logf("reads racing 20 overwrites: %d returned a whole version, %d failed", whole, failed)
	})

	t.Run("DeleteIsIdempotent", func(t *testing.T) {
		s := open(t).store
		if _, err := s.Put(ctx, "a/x", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if err := s.Delete(ctx, "a/x"); err != nil {
				t.Fatalf("delete #%d: %v", i+1, err)
			}
		}
		if err := s.Delete(ctx, "never/was"); err != nil {
			t.Fatalf("delete of a name never stored: %v", err)
		}
		if _, err := s.Get(ctx, "a/x"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Get after delete: %v, want fs.ErrNotExist", err)
		}
		if list, err := s.List(ctx, ""); err != nil || len(list) != 0 {
			t.Fatalf("after delete listed %s, %v", names(list), err)
		}
	})

	t.Run("DetectsDamage", func(t *testing.T) {
		sub := open(t)
		for _, damage := range []string{"hellO", "hell", "hello!"} {
			if _, err := sub.store.Put(ctx, "etcd/a.db", strings.NewReader("hello")); err != nil {
				t.Fatal(err)
			}
			sub.corrupt(t, "etcd/a.db", []byte(damage))
			r, err := sub.store.Get(ctx, "etcd/a.db")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(r); !errors.Is(err, storage.ErrChecksum) {
				t.Errorf("read of %q stored as \"hello\": %v, want ErrChecksum", damage, err)
			}
			r.Close()
		}
	})

	t.Run("RejectsBadNames", func(t *testing.T) {
		s := open(t).store
		for _, bad := range []string{"", ".", "..", "../x", "a/../../x", "/abs", "a.sha256", "d/a.sha256"} {
			if _, err := s.Put(ctx, bad, strings.NewReader("x")); err == nil {
				t.Errorf("Put(%q) accepted", bad)
			}
			if _, err := s.Get(ctx, bad); err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Get(%q): %v, want the name refused", bad, err)
			}
			if err := s.Delete(ctx, bad); err == nil {
				t.Errorf("Delete(%q) accepted", bad)
			}
		}
		if list, err := s.List(ctx, ""); err != nil || len(list) != 0 {
			t.Fatalf("bad names stored %s, %v", names(list), err)
		}
	})

	t.Run("HonoursContext", func(t *testing.T) {
		s := open(t).store
		big := strings.Repeat("x", 4<<20)
		if _, err := s.Put(ctx, "big", strings.NewReader(big)); err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Put(done, "late", strings.NewReader("x")); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a cancelled context: %v", err)
		}
		if _, err := s.Get(done, "big"); !errors.Is(err, context.Canceled) {
			t.Errorf("Get with a cancelled context: %v", err)
		}
		if _, err := s.List(done, ""); !errors.Is(err, context.Canceled) {
			t.Errorf("List with a cancelled context: %v", err)
		}
		if err := s.Delete(done, "big"); !errors.Is(err, context.Canceled) {
			t.Errorf("Delete with a cancelled context: %v", err)
		}
		// Cancelled halfway through a read.
		reading, cancel := context.WithCancel(ctx)
		r, err := s.Get(reading, "big")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if b, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
			t.Errorf("read after cancel: %d bytes, %v", len(b), err)
		}
		r.Close()
		if list, err := s.List(ctx, ""); err != nil || names(list) != "big" {
			t.Fatalf("after cancelled calls listed %s, %v", names(list), err)
		}
	})
}

func TestDir(t *testing.T) {
	testStore(t, func(t *testing.T) subject {
		d := storage.Dir{Root: filepath.Join(t.TempDir(), "store")}
		return subject{store: d, corrupt: func(t *testing.T, name string, content []byte) {
			if err := os.WriteFile(filepath.Join(d.Root, filepath.FromSlash(name)), content, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

// A journaled Dir behaves as every Store does (the corruption it is put to
// waits until the object is in the Dir, as a disk's would).
func TestJournaled(t *testing.T) {
	testStore(t, func(t *testing.T) subject {
		root := filepath.Join(t.TempDir(), "store")
		j, err := storage.OpenJournaled(context.Background(), storage.Dir{Root: root}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		return subject{store: j, corrupt: func(t *testing.T, name string, content []byte) {
			if err := j.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), content, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

func read(t *testing.T, s storage.Store, name string) string {
	t.Helper()
	r, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(b)
}

func names(objs []storage.Object) string {
	var n []string
	for _, o := range objs {
		n = append(n, o.Name)
	}
	return strings.Join(n, " ")
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source failed") }

// BenchmarkDirPut is what storing one recycle-bin copy costs: a new name
// in its resource's folder, a few KB, synced before Put returns.
func BenchmarkDirPut(b *testing.B) {
	d := storage.Dir{Root: b.TempDir()}
	body := bytes.Repeat([]byte("x"), 4096)
	i := 0
	for b.Loop() {
		i++
		if _, err := d.Put(context.Background(), fmt.Sprintf("entries/ns/configmaps/cm-%d@%d-uid.json", i, i), bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJournaledPut is BenchmarkDirPut through the journal: what a
// capture waits for (the Dir's own store runs behind it).
func BenchmarkJournaledPut(b *testing.B) {
	j, err := storage.OpenJournaled(context.Background(), storage.Dir{Root: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	body := bytes.Repeat([]byte("x"), 4096)
	i := 0
	for b.Loop() {
		i++
		if _, err := j.Put(context.Background(), fmt.Sprintf("entries/ns/configmaps/cm-%d@%d-uid.json", i, i), bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}
