package manager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
)

// TestRecycleBinStoreFlags: --recycle-bin-dir and --recycle-bin-store name
// the same kind of place, one at a time; a directory is made for the
// manager alone and shown as it is.
func TestRecycleBinStoreFlags(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	dir := filepath.Join(t.TempDir(), "bin")
	for _, c := range []struct {
		name       string
		dir, store string
		location   string // of a bin made
		err        string
	}{
		{name: "neither: no bin"},
		{name: "a directory", dir: dir, location: dir},
		{name: "a directory as a store", store: dir, location: dir},
		{name: "both", dir: dir, store: dir, err: "both set: give one"},
		{name: "a bad store", store: "gs://bucket/x", err: "--recycle-bin-store: store location: unknown scheme gs://"},
	} {
		b, err := recycleBin(context.Background(), cfg, Options{RecycleBinDir: c.dir, RecycleBinStore: c.store, Log: logr.Discard()})
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.name, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.location == "" && b != nil:
			t.Errorf("%s: a bin at %s", c.name, b.location)
		case c.location != "" && (b == nil || b.location != c.location):
			t.Errorf("%s: bin %+v, want one at %s", c.name, b, c.location)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the bin's directory: %v, %v; want it made, mode 0700", fi, err)
	}
}
