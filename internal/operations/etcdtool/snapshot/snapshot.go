// Package snapshot saves etcd snapshots to a storage.Store and proves each
// one readable before calling it saved: etcd's own trailing SHA-256 matches,
// bbolt opens it and its consistency check passes, and the copy in the store
// reads back with the same checksum.
package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// Info is what verification found.
type Info struct {
	Name string `json:"name,omitempty"`
	Size int64  `json:"size"`
	// SHA256 is the checksum of the whole file, as the store records it.
	SHA256 string `json:"sha256"`
	// EtcdHash says etcd's trailing hash was present and matched.
	EtcdHash bool `json:"etcdHash"`
	// Revision is the newest revision in the snapshot; Revisions counts
	// the revisions kept.
	Revision  int64 `json:"revision"`
	Revisions int   `json:"revisions"`
	// CompactedRevision is the last compaction etcd recorded.
	CompactedRevision int64 `json:"compactedRevision"`
}

// Verify checks a snapshot file: etcd's trailing SHA-256 (a snapshot from
// the Snapshot API ends with the hash of what precedes it), then bbolt's
// own consistency check of every page, then that the key bucket reads.
func Verify(path string) (Info, error) {
	var info Info
	f, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return info, err
	}
	info.Size = st.Size()
	whole := sha256.New()
	// etcdutl's rule: a db is a whole number of 512-byte pages, so 32
	// extra bytes are the hash.
	if info.Size%512 == sha256.Size {
		body := sha256.New()
		if _, err := io.Copy(io.MultiWriter(body, whole), io.LimitReader(f, info.Size-sha256.Size)); err != nil {
			return info, err
		}
		tail := make([]byte, sha256.Size)
		if _, err := io.ReadFull(f, tail); err != nil {
			return info, err
		}
		whole.Write(tail)
		if !bytes.Equal(body.Sum(nil), tail) {
			return info, fmt.Errorf("%s: etcd's SHA-256 at the end does not match the content: the snapshot is damaged", path)
		}
		info.EtcdHash = true
	} else if _, err := io.Copy(whole, f); err != nil {
		return info, err
	}
	info.SHA256 = hex.EncodeToString(whole.Sum(nil))

	db, err := source.OpenSnapshot(path)
	if err != nil {
		return info, err
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() { // drain: the checker stops when read to the end
			if first == nil {
				first = fmt.Errorf("%s: bbolt consistency check: %w", path, err)
			}
		}
		if first != nil {
			return first
		}
		if b := tx.Bucket([]byte("meta")); b != nil {
			if v := b.Get([]byte("finishedCompactRev")); len(v) >= 8 {
				info.CompactedRevision = int64(binary.BigEndian.Uint64(v))
			}
		}
		return nil
	})
	if err != nil {
		return info, err
	}
	err = source.WalkSnapshot(path, func(e source.Entry) error {
		info.Revisions++
		info.Revision = max(info.Revision, e.ModRevision)
		return nil
	})
	return info, err
}

// Save streams a snapshot from etcd into a local file in tmpDir, verifies
// it, stores it under name and reads the stored copy back against its
// checksum.
func Save(ctx context.Context, cli *clientv3.Client, store storage.Store, name, tmpDir string) (Info, error) {
	tmp, err := os.CreateTemp(tmpDir, "etcd-snapshot-*.db")
	if err != nil {
		return Info{}, err
	}
	defer os.Remove(tmp.Name())
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		tmp.Close()
		return Info{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	_, err = io.Copy(tmp, rc)
	rc.Close()
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Info{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	info, err := Verify(tmp.Name())
	if err != nil {
		return info, err
	}
	if !info.EtcdHash {
		return info, errors.New("etcd sent a snapshot without its trailing SHA-256: cannot prove it whole")
	}
	f, err := os.Open(tmp.Name())
	if err != nil {
		return info, err
	}
	obj, err := store.Put(ctx, name, f)
	f.Close()
	if err != nil {
		return info, err
	}
	if obj.SHA256 != info.SHA256 {
		return info, fmt.Errorf("stored %s with checksum %s, but the snapshot's is %s", name, obj.SHA256, info.SHA256)
	}
	r, err := store.Get(ctx, name)
	if err != nil {
		return info, err
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return info, fmt.Errorf("read back %s: %w", name, err)
	}
	info.Name = name
	return info, nil
}

// DefaultName names a snapshot by its time: etcd/2026-11-23T23-30-00Z.db.
func DefaultName(now time.Time) string {
	return "etcd/" + now.UTC().Format("2006-01-02T15-04-05Z") + ".db"
}
