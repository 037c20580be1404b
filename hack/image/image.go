package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options say what to build.
type Options struct {
	Binary, Out, Tag, CACerts string
}

// User is the image's user and group: distroless's nonroot.
const User = 65532

// BinaryPath is where the binary lives in the image.
const BinaryPath = "/usr/local/bin/rampart"

// epoch is the time of every file and of the image: SOURCE_DATE_EPOCH,
// else the Unix epoch (a reproducible build).
func epoch() time.Time {
	if s, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		return time.Unix(s, 0).UTC()
	}
	return time.Unix(0, 0).UTC()
}

// Image is the image: one layer (the binary, CA certificates, passwd and
// group naming the user), run as User.
func Image(binary, caCerts []byte) (v1.Image, error) {
	at := epoch()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: at, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: at, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", User, User)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", User)
	for _, step := range []func() error{
		func() error { return dir("etc/", 0o755) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("etc/ssl/", 0o755) },
		func() error { return dir("etc/ssl/certs/", 0o755) },
		func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, caCerts) },
		func() error {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: at, Format: tar.FormatPAX})
		},
		func() error { return dir("usr/", 0o755) },
		func() error { return dir("usr/local/", 0o755) },
		func() error { return dir("usr/local/bin/", 0o755) },
		func() error { return file(BinaryPath[1:], 0o755, binary) },
		tw.Close,
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: at}, CreatedBy: "make image"}}); err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", v1.Time{Time: at}
	cfg.Config.User = fmt.Sprintf("%d:%d", User, User)
	cfg.Config.Entrypoint = []string{BinaryPath}
	cfg.Config.Cmd = []string{"version"}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	return mutate.ConfigFile(img, cfg)
}

// Write builds the image and writes it, as an OCI image layout in a tar
// archive, to o.Out; it returns the manifest's digest.
func Write(o Options) (string, error) {
	if o.Binary == "" {
		return "", errors.New("-binary: give the static rampart binary (make image builds it with CGO_ENABLED=0)")
	}
	binary, err := os.ReadFile(o.Binary)
	if err != nil {
		return "", err
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return "", fmt.Errorf("the CA bundle (install Debian's ca-certificates, or give -ca-certificates): %w", err)
	}
	img, err := Image(binary, ca)
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "rampart-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	full, err := containerdName(o.Tag)
	if err != nil {
		return "", err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Tag,
		"io.containerd.image.name":          full,
	})); err != nil {
		return "", err
	}
	return digest.String(), tarDir(dir, o.Out)
}

// containerdName is the tag as containerd's CRI plugin names images:
// normalized, as the kubelet's "rampart:dev" reaches it
// (docker.io/library/rampart:dev). `ctr images import` names an image by
// this annotation first; by the tag alone ("rampart:dev") the kubelet does
// not find it and a pod of it fails with ErrImageNeverPull.
func containerdName(tag string) (string, error) {
	t, err := name.NewTag(tag)
	if err != nil {
		return "", fmt.Errorf("-tag %q: %w", tag, err)
	}
	registry := t.RegistryStr()
	if registry == name.DefaultRegistry {
		// go-containerregistry spells Docker Hub index.docker.io.
		registry = "docker.io"
	}
	return registry + "/" + t.RepositoryStr() + ":" + t.TagStr(), nil
}

// tarDir writes the files under dir to a tar archive at out (written
// aside and renamed: a failed build leaves no half archive).
func tarDir(dir, out string) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".rampart-image-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	at := epoch()
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), at, 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Close()
	}
	if err != nil {
		tmp.Close()
		return err
	}
	return os.Rename(tmp.Name(), out)
}
