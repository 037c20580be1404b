package storage_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/storage"
)

func TestDirStoresChecksNamesAndDetectsDamage(t *testing.T) {
	ctx := context.Background()
	d := storage.Dir{Root: filepath.Join(t.TempDir(), "store")}
	o, err := d.Put(ctx, "etcd/a.db", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	// sha256("hello")
	if o.Size != 5 || o.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" {
		t.Fatalf("object %+v", o)
	}
	list, err := d.List(ctx, "etcd/")
	if err != nil || len(list) != 1 || list[0].Name != "etcd/a.db" {
		t.Fatalf("list %+v %v", list, err)
	}
	r, err := d.Get(ctx, "etcd/a.db")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(r); err != nil || string(b) != "hello" {
		t.Fatalf("read %q %v", b, err)
	}
	r.Close()
	if err := os.WriteFile(filepath.Join(d.Root, "etcd", "a.db"), []byte("hellO"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ = d.Get(ctx, "etcd/a.db")
	if _, err := io.ReadAll(r); !errors.Is(err, storage.ErrChecksum) {
		t.Fatalf("damaged read: %v", err)
	}
	r.Close()
	for _, bad := range []string{"../x", "/abs", "", "a.sha256"} {
		if _, err := d.Put(ctx, bad, strings.NewReader("")); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
	}
	if err := d.Delete(ctx, "etcd/a.db"); err != nil {
		t.Fatal(err)
	}
	if list, _ := d.List(ctx, ""); len(list) != 0 {
		t.Fatalf("after delete: %+v", list)
	}
}
