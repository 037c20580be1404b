package backup

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/rampart-io/rampart/internal/recyclebin"
	"github.com/rampart-io/rampart/internal/restore"
	"github.com/rampart-io/rampart/internal/storage"
)

// A backup NAME is stored as backups/NAME/backup.tar.gz and, once that is
// whole, backups/NAME/manifest.json.
const backupsPrefix = "backups/"

// ArchiveName is where backup name's archive is stored.
func ArchiveName(name string) string { return backupsPrefix + name + "/backup.tar.gz" }

func manifestName(name string) string { return backupsPrefix + name + "/" + ManifestFile }

func marshalManifest(m *Manifest) ([]byte, error) { return json.MarshalIndent(m, "", "  ") }

// ReadManifest reads the manifest stored beside backup name's archive.
func ReadManifest(ctx context.Context, s storage.Store, name string) (*Manifest, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	r, err := s.Get(ctx, manifestName(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no backup %s in the store: see rampart backup list", name)
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var m Manifest
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		return nil, fmt.Errorf("the manifest of backup %s: %w", name, err)
	}
	return &m, m.check()
}

// List reads the manifests of every backup in the store, oldest first.
func List(ctx context.Context, s storage.Store) ([]*Manifest, error) {
	objs, err := s.List(ctx, backupsPrefix)
	if err != nil {
		return nil, err
	}
	var out []*Manifest
	for _, o := range objs {
		rest, ok := strings.CutPrefix(o.Name, backupsPrefix)
		if !ok || path.Base(rest) != ManifestFile || path.Dir(rest) == "." || strings.Contains(path.Dir(rest), "/") {
			continue
		}
		m, err := ReadManifest(ctx, s, path.Dir(rest))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.SortStableFunc(out, func(a, b *Manifest) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// Delete removes backup name: its manifest first, so that it is no
// longer listed while its archive goes.
func Delete(ctx context.Context, s storage.Store, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := s.Delete(ctx, manifestName(name)); err != nil {
		return err
	}
	return s.Delete(ctx, ArchiveName(name))
}

// Object is one object read back from a backup.
type Object struct {
	File File
	// Data is the object's JSON; nil when it is sealed with a key not
	// given.
	Data []byte
}

// Item is the object for a restore.
func (o Object) Item() restore.Item {
	return restore.Item{Resource: o.File.GVR(), Namespace: o.File.Namespace, Name: o.File.Name, UID: o.File.UID, Object: o.Data}
}

// Read reads backup name's archive whole, checks every file against the
// manifest's SHA-256 (and the archive against the store's), and returns
// the manifest in the archive and the objects for which keep is true,
// Secrets opened with key (left sealed when key is nil or another).
func Read(ctx context.Context, s storage.Store, name string, key *recyclebin.Key, keep func(File) bool) (*Manifest, []Object, error) {
	beside, err := ReadManifest(ctx, s, name)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.Get(ctx, ArchiveName(name))
	if err != nil {
		return nil, nil, fmt.Errorf("backup %s: %w", name, err)
	}
	defer r.Close()
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("backup %s: not a gzipped archive: %w", name, err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	sums := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: %w", name, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: %s: %w", name, h.Name, err)
		}
		sum := sha256.Sum256(data)
		sums[h.Name] = hex.EncodeToString(sum[:])
		files[h.Name] = data
	}
	// Read to the end, so that the store's checksum of the whole archive
	// is checked too.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, nil, fmt.Errorf("backup %s: %w", name, err)
	}
	raw, ok := files[ManifestFile]
	if !ok {
		return nil, nil, fmt.Errorf("backup %s: the archive holds no %s (cut short?)", name, ManifestFile)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("backup %s: %s: %w", name, ManifestFile, err)
	}
	if err := m.check(); err != nil {
		return nil, nil, err
	}
	if m.Name != beside.Name || m.Objects != beside.Objects {
		return nil, nil, fmt.Errorf("backup %s: the archive's manifest (%s, %d objects) is not the one beside it (%s, %d objects)", name, m.Name, m.Objects, beside.Name, beside.Objects)
	}
	var out []Object
	for _, f := range m.Files {
		data, ok := files[f.Path]
		if !ok {
			return nil, nil, fmt.Errorf("backup %s: %s (%s) is missing from the archive", name, f.Path, f.Described())
		}
		if sums[f.Path] != f.SHA256 {
			return nil, nil, fmt.Errorf("backup %s: %s (%s): %w", name, f.Path, f.Described(), storage.ErrChecksum)
		}
		if keep != nil && !keep(f) {
			continue
		}
		o := Object{File: f, Data: data}
		if f.KeyID != "" {
			o.Data = nil
			if key != nil && key.ID() == f.KeyID {
				if o.Data, err = key.Open(data, []byte(f.UID)); err != nil {
					return nil, nil, fmt.Errorf("backup %s: %s: %w", name, f.Described(), err)
				}
			}
		}
		out = append(out, o)
	}
	return &m, out, nil
}
