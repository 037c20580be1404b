package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The archive `make image` writes is an OCI layout holding one image:
// run as 65532, the binary at its entrypoint executable, CA certificates,
// passwd naming the user, the tag as the reference name; and the same
// input gives the same digest.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin, ca := filepath.Join(dir, "rampart"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(bin, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	digest, err := Write(Options{Binary: bin, Out: out, Tag: "rampart:test", CACerts: ca})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Write(Options{Binary: bin, Out: filepath.Join(dir, "again.tar"), Tag: "rampart:test", CACerts: ca})
	if err != nil || again != digest {
		t.Errorf("a second build: %s, %v; want the same digest %s", again, err, digest)
	}

	unpacked := filepath.Join(dir, "oci")
	untar(t, out, unpacked)
	idx, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "rampart:test" || m.Manifests[0].Digest.String() != digest {
		t.Fatalf("index %+v, want one image named rampart:test with digest %s", m.Manifests, digest)
	}
	if got := m.Manifests[0].Annotations["io.containerd.image.name"]; got != "docker.io/library/rampart:test" {
		t.Errorf("containerd's name for it %q, want docker.io/library/rampart:test (the kubelet's rampart:test)", got)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != BinaryPath || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("config %+v, want user 65532:65532, entrypoint %s, linux/amd64", cfg.Config, BinaryPath)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files["/"+h.Name] = h
	}
	for name, mode := range map[string]int64{BinaryPath: 0o755, "/etc/ssl/certs/ca-certificates.crt": 0o644, "/etc/passwd": 0o644, "/etc/group": 0o644, "/tmp/": 0o1777} {
		if h := files[name]; h == nil || h.Mode != mode {
			t.Errorf("%s: %+v, want mode %o", name, h, mode)
		}
	}
	if h := files[BinaryPath]; h != nil && h.Size != int64(len("\x7fELF not really")) {
		t.Errorf("the binary's size %d", h.Size)
	}
}

// The name containerd imports the image as is the one the kubelet asks
// its CRI plugin for: a pod's image, normalized.
func TestContainerdName(t *testing.T) {
	for tag, want := range map[string]string{
		"rampart:dev":                       "docker.io/library/rampart:dev",
		"rampart-io/rampart:v1":             "docker.io/rampart-io/rampart:v1",
		"ghcr.io/rampart-io/rampart:v1.2.3": "ghcr.io/rampart-io/rampart:v1.2.3",
		"localhost:5000/rampart:1":          "localhost:5000/rampart:1",
		"rampart":                           "docker.io/library/rampart:latest",
	} {
		if got, err := containerdName(tag); err != nil || got != want {
			t.Errorf("containerdName(%q) = %q, %v; want %q", tag, got, err, want)
		}
	}
	if _, err := containerdName("Rampart:dev"); err == nil {
		t.Error("containerdName accepted an upper-case repository, which no runtime takes")
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
