package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// Large objects in namespace other: a backup of the whole cluster that a
// restore of namespace shop reads.
const (
	largeObjects = 40
	largeSize    = 512 << 10
)

func inShop(f File) bool {
	return f.Namespace == "shop" || (f.Resource == "namespaces" && f.Name == "shop")
}

// clusterWithLargeObjects backs up the whole test cluster, with
// largeObjects ConfigMaps of largeSize bytes each added in namespace
// other, as backup "whole".
func clusterWithLargeObjects(t testing.TB) cluster {
	t.Helper()
	ctx := context.Background()
	c := newCluster(t, testKey(t))
	configmaps := c.creator.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("other")
	for i := range largeObjects {
		// Varied, so that no two files are alike.
		big := strings.Repeat(fmt.Sprintf("%07d", i), largeSize/7)
		u := obj("v1", "ConfigMap", "other", fmt.Sprintf("large-%d", i), nil, map[string]any{"data": map[string]any{"blob": big}})
		if _, err := configmaps.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.creator.Create(ctx, "whole", Selection{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// rewriteArchive replaces backup name's archive by one with every file
// passed through change (the store's checksum then holds again).
func rewriteArchive(t *testing.T, s storage.Store, name string, change func(path string, data []byte) []byte) {
	t.Helper()
	ctx := context.Background()
	r, err := s.Get(ctx, ArchiveName(name))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	gz, err := gzip.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for tr := tar.NewReader(gz); ; {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		data = change(h.Name, data)
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, ArchiveName(name), &out); err != nil {
		t.Fatal(err)
	}
}

// A file the read does not return is still checked: one damaged object of
// namespace other fails a read of namespace shop, and nothing is returned.
func TestBackupReadFailsClosedOnAFileNotSelected(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testKey(t))
	if _, err := c.creator.Create(ctx, "b", Selection{ExcludeResources: []string{"secrets"}}); err != nil {
		t.Fatal(err)
	}
	if _, objs, err := Read(ctx, c.store, "b", nil, inShop); err != nil || len(objs) == 0 {
		t.Fatalf("reading namespace shop of an undamaged backup: %d objects, %v", len(objs), err)
	}
	rewriteArchive(t, c.store, "b", func(path string, data []byte) []byte {
		if path == "objects/other/configmaps/b.json" {
			return bytes.Replace(data, []byte(`"name":"b"`), []byte(`"name":"c"`), 1)
		}
		return data
	})
	m, objs, err := Read(ctx, c.store, "b", nil, inShop)
	if !errors.Is(err, storage.ErrChecksum) || !strings.Contains(err.Error(), "configmaps/b in namespace other") {
		t.Errorf("reading namespace shop of a backup damaged in namespace other: %v", err)
	}
	if m != nil || objs != nil {
		t.Errorf("a failed read returned the manifest %v and %d objects", m != nil, len(objs))
	}
}

// What is kept is chosen by the manifest beside the archive, so the one
// in the archive must list the same files: a beside manifest that lists
// fewer is refused, not trusted.
func TestBackupReadRefusesManifestsThatDiffer(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testKey(t))
	if _, err := c.creator.Create(ctx, "b", Selection{Namespaces: []string{"shop"}}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(ctx, c.store, "b")
	if err != nil {
		t.Fatal(err)
	}
	m.Files = m.Files[1:]
	raw, err := marshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.Put(ctx, manifestName("b"), bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(ctx, c.store, "b", nil, nil); err == nil || !strings.Contains(err.Error(), "lists other files than the one beside it") {
		t.Errorf("reading a backup whose manifests differ: %v", err)
	}
}

// allocated is how many bytes f allocates on the heap. It counts every
// allocation, freed or not, so it bounds the most f held at once, and
// does not depend on when the garbage collector ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A read of one namespace holds that namespace, not the backup: reading
// shop from a backup with 20 MiB of objects in other allocates a small
// part of that, while reading all of it allocates at least all of it.
func TestBackupReadHoldsOnlyWhatItReturns(t *testing.T) {
	ctx := context.Background()
	c := clusterWithLargeObjects(t)
	const others = largeObjects * largeSize
	var shop, all []Object
	var err error
	selected := allocated(func() { _, shop, err = Read(ctx, c.store, "whole", nil, inShop) })
	if err != nil || len(shop) == 0 {
		t.Fatalf("reading namespace shop: %d objects, %v", len(shop), err)
	}
	for _, o := range shop {
		if !inShop(o.File) {
			t.Errorf("reading namespace shop returned %s", o.File.Described())
		}
	}
	whole := allocated(func() { _, all, err = Read(ctx, c.store, "whole", nil, nil) })
	if err != nil || len(all) <= len(shop)+largeObjects-1 {
		t.Fatalf("reading the whole backup: %d objects, %v", len(all), err)
	}
	t.Logf("allocated reading namespace shop: %d KiB; reading all: %d KiB; objects in other: %d KiB", selected>>10, whole>>10, others>>10)
	if selected > others/10 {
		t.Errorf("reading namespace shop allocated %d bytes, more than a tenth of the %d bytes of objects in other namespaces", selected, others)
	}
	if whole < others {
		t.Errorf("reading the whole backup allocated %d bytes, less than the %d bytes it returns: the measure is wrong", whole, others)
	}
}

// BenchmarkBackupRead reads one namespace, and all, of a backup whose
// other namespace holds large objects: see B/op.
func BenchmarkBackupRead(b *testing.B) {
	ctx := context.Background()
	c := clusterWithLargeObjects(b)
	for _, bc := range []struct {
		name string
		keep func(File) bool
	}{{"namespace", inShop}, {"all", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Read(ctx, c.store, "whole", nil, bc.keep); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
