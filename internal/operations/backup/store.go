package backup

import (
	"archive/tar"
	"bytes"
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

	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
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

// Read reads backup name's archive, checks every file against the
// manifest's SHA-256 (and the archive against the store's), and returns
// the manifest in the archive and the objects for which keep is true,
// Secrets opened with key (left sealed when key is nil or another).
//
// It fails closed, as if it read the archive whole: nothing is returned
// unless every file matches and the archive was read to its end. But it
// holds only the files it returns: each file is hashed as it streams by
// and kept only if selected, so that a restore of one namespace from a
// backup of the whole cluster holds that namespace, not the cluster.
// The archive's manifest is its last file, so what to keep is decided
// with the copy beside it, which must then list the very same files.
func Read(ctx context.Context, s storage.Store, name string, key *recyclebin.Key, keep func(File) bool) (*Manifest, []Object, error) {
	beside, err := ReadManifest(ctx, s, name)
	if err != nil {
		return nil, nil, err
	}
	wanted := map[string]bool{}
	for _, f := range beside.Files {
		if keep == nil || keep(f) {
			wanted[f.Path] = true
		}
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
	copyBuf := make([]byte, 32<<10) // one for every file not held
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: %w", name, err)
		}
		held := wanted[h.Name] || h.Name == ManifestFile
		sum, data, err := hashFile(tr, h.Size, held, copyBuf)
		if err != nil {
			return nil, nil, fmt.Errorf("backup %s: %s: %w", name, h.Name, err)
		}
		sums[h.Name] = sum
		if held {
			files[h.Name] = data
		} else {
			delete(files, h.Name) // a later copy of a name replaces the earlier
		}
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
	// What was kept was chosen by the files beside; the archive's own
	// must be the same, or a selected file may have gone unheld.
	if !slices.Equal(m.Files, beside.Files) {
		return nil, nil, fmt.Errorf("backup %s: the archive's manifest lists other files than the one beside it: the backup was altered after it was made", name)
	}
	var out []Object
	for _, f := range m.Files {
		sum, ok := sums[f.Path]
		if !ok {
			return nil, nil, fmt.Errorf("backup %s: %s (%s) is missing from the archive", name, f.Path, f.Described())
		}
		if sum != f.SHA256 {
			return nil, nil, fmt.Errorf("backup %s: %s (%s): %w", name, f.Path, f.Described(), storage.ErrChecksum)
		}
		if !wanted[f.Path] {
			continue
		}
		data := files[f.Path]
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

// maxPrealloc bounds the room made ahead for a file from its tar header's
// size, which a damaged archive may overstate.
const maxPrealloc = 16 << 20

// hashFile reads one file of the archive to its end and returns its
// SHA-256, and its content when hold is true; buf is room for copying.
func hashFile(r io.Reader, size int64, hold bool, buf []byte) (string, []byte, error) {
	h := sha256.New()
	if !hold {
		if _, err := io.CopyBuffer(h, r, buf); err != nil {
			return "", nil, err
		}
		return hex.EncodeToString(h.Sum(nil)), nil, nil
	}
	var data bytes.Buffer
	// ReadFrom wants MinRead bytes free to see the end: room for them too,
	// or it doubles the buffer for the last read.
	data.Grow(int(min(max(size, 0), maxPrealloc)) + bytes.MinRead)
	if _, err := data.ReadFrom(io.TeeReader(r, h)); err != nil {
		return "", nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), data.Bytes(), nil
}
