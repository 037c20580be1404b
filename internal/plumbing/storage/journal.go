package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Journaled is a Dir whose Put returns as soon as the object is in a
// write-ahead journal: one write and one fdatasync on a file filled with
// zeros in advance, so that the sync flushes data and no file-system
// metadata, where a Dir's Put syncs three times (the object, its checksum,
// the folder). A background writer then stores each object in the Dir as
// its Put does; until it has, Get, List and Delete answer from memory.
// Opening replays what an earlier process journaled but did not store.
//
// It exists for the recycle bin, whose capture a protected delete waits
// for. No well-kept Go library offers a small embedded write-ahead log of
// this shape (etcd's wal and bbolt are databases with their own files and
// formats); it is written here, in one file, tested for torn tails,
// replays and concurrent appends.
//
// Several processes may share the Dir (manager replicas on one volume):
// each appends to its own journal, locked (flock) while it runs, and
// replays only journals nobody holds.
type Journaled struct {
	Dir
	log *slog.Logger

	mu      sync.Mutex
	active  *segment
	pending map[string]*pendingObject
	closed  bool

	syncMu sync.Mutex // one fdatasync at a time; waiters share it
	// storeMu orders the background writer's store of an object with a
	// Delete of it: a delete never comes before the store it undoes.
	storeMu sync.Mutex

	todo chan *pendingObject
	done chan struct{}
	wg   sync.WaitGroup

	// own holds the paths of this store's journal files: Get reads other
	// processes' journals, never its own (what it deleted stays there
	// until the file is removed; its pending map is what it holds).
	own sync.Map
}

// segmentSize is one journal file's size: a record larger than what is
// left starts a new file, and one larger than a file goes to the Dir.
const segmentSize = 4 << 20

// idleRotate is how long a journal stays active with everything stored:
// then a fresh one takes over and the old one is removed, so that a crash
// replays little (and never objects deleted since, but within this
// window).
const idleRotate = 30 * time.Second

// adoptEvery is how often a running process stores what the journals of
// processes that ended (a replica killed) left, without waiting for one to
// start again.
var adoptEvery = 10 * time.Second

// maxPending bounds what waits for the background writer: past it, Put
// writes to the Dir directly.
const maxPending = 4096

const journalDir = ".journal"

// record header: magic, name length, data length, CRC-32C of name+data.
const (
	recordMagic  = 0x52504a31 // "RPJ1"
	recordHeader = 4 + 2 + 4 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type segment struct {
	f       *os.File
	path    string
	end     int64 // next write offset
	synced  int64 // written and synced up to here
	pending int   // records not yet stored in the Dir
	sealed  bool  // no longer written; removed once pending is 0
	used    time.Time
}

type pendingObject struct {
	name string
	data []byte
	seg  *segment
	sum  string
	at   time.Time
}

// OpenJournaled replays the journals no running process holds into d,
// removes them, and starts a journal of its own. Close stops it.
func OpenJournaled(ctx context.Context, d Dir, log *slog.Logger) (*Journaled, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := filepath.Join(d.Root, journalDir)
	if err := mkdirSynced(dir); err != nil {
		return nil, err
	}
	j := &Journaled{Dir: d, log: log, pending: map[string]*pendingObject{}, todo: make(chan *pendingObject, maxPending), done: make(chan struct{})}
	if err := j.replay(ctx, dir); err != nil {
		return nil, err
	}
	seg, err := newSegment(dir)
	if err != nil {
		return nil, err
	}
	j.active = seg
	j.own.Store(seg.path, true)
	j.wg.Add(1)
	go j.store()
	return j, nil
}

// newSegment makes a zero-filled, synced, locked journal file. It is
// locked before it takes its .wal name, so that no other process ever
// takes it for an ended one's.
func newSegment(dir string) (*segment, error) {
	p := filepath.Join(dir, strconv.FormatInt(time.Now().UnixNano(), 10)+"-"+strconv.Itoa(os.Getpid())+".wal")
	f, err := os.OpenFile(p+".new", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(p + ".new") // gone once renamed
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if _, err := f.Write(make([]byte, segmentSize)); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(p+".new", p); err != nil {
		f.Close()
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{f: f, path: p, used: time.Now()}, nil
}

// Put journals the object and returns once it is durable.
func (j *Journaled) Put(ctx context.Context, name string, r io.Reader) (Object, error) {
	clean, err := cleanName(name)
	if err != nil {
		return Object{}, err
	}
	if strings.HasPrefix(clean, journalDir+"/") {
		return Object{}, fmt.Errorf("invalid object name %q: %s/ holds the store's journal", name, journalDir)
	}
	data, err := io.ReadAll(ctxReader{ctx, r})
	if err != nil {
		return Object{}, fmt.Errorf("store %s: %w", name, err)
	}
	// The object's folder is made (and synced) now: a folder the Dir
	// cannot make fails the Put, not the store behind it.
	p, err := j.path(clean)
	if err != nil {
		return Object{}, err
	}
	if err := mkdirSynced(filepath.Dir(p)); err != nil {
		return Object{}, fmt.Errorf("store %s: %w", name, err)
	}
	rec := encodeRecord(clean, data)
	j.mu.Lock()
	if j.closed || len(j.pending) >= maxPending || len(rec) > segmentSize {
		j.mu.Unlock()
		return j.Dir.Put(ctx, clean, bytes.NewReader(data))
	}
	seg, err := j.room(len(rec))
	if err != nil {
		j.mu.Unlock()
		return Object{}, err
	}
	if _, err := seg.f.WriteAt(rec, seg.end); err != nil {
		j.mu.Unlock()
		return Object{}, fmt.Errorf("journal %s: %w", name, err)
	}
	seg.end += int64(len(rec))
	seg.pending++
	seg.used = time.Now()
	end := seg.end
	po := &pendingObject{name: clean, data: data, seg: seg, sum: sha256Hex(data), at: time.Now()}
	j.mu.Unlock()

	if err := j.syncTo(seg, end); err != nil {
		j.forget(po)
		return Object{}, fmt.Errorf("journal %s: %w", name, err)
	}
	j.mu.Lock()
	j.pending[clean] = po
	j.mu.Unlock()
	j.todo <- po
	return Object{Name: clean, Size: int64(len(data)), SHA256: po.sum, Modified: po.at}, nil
}

// room is the segment rec's bytes go to, a new one if the active one is
// full (j.mu held).
func (j *Journaled) room(n int) (*segment, error) {
	if j.active.end+int64(n) <= segmentSize {
		return j.active, nil
	}
	return j.rotate()
}

// rotate seals the active segment (synced first: what it holds must not
// wait for a sync that will never come) and starts another (j.mu held).
func (j *Journaled) rotate() (*segment, error) {
	old := j.active
	// j.mu keeps appenders out, so this sync covers all old holds.
	if err := unix.Fdatasync(int(old.f.Fd())); err != nil {
		return nil, err
	}
	old.synced = old.end
	seg, err := newSegment(filepath.Dir(old.path))
	if err != nil {
		return nil, err
	}
	j.active = seg
	j.own.Store(seg.path, true)
	old.sealed = true
	if old.pending == 0 {
		j.remove(old)
	}
	return seg, nil
}

// syncTo makes seg durable up to end. Appenders that wrote while another
// sync ran find their bytes covered by the next one: one fdatasync serves
// them all (group commit).
func (j *Journaled) syncTo(seg *segment, end int64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	j.mu.Lock()
	synced := seg.synced
	target := seg.end
	j.mu.Unlock()
	if synced >= end {
		return nil
	}
	if err := unix.Fdatasync(int(seg.f.Fd())); err != nil {
		return err
	}
	j.mu.Lock()
	seg.synced = max(seg.synced, target)
	j.mu.Unlock()
	return nil
}

// store writes each journaled object to the Dir, and rotates an idle
// journal.
func (j *Journaled) store() {
	defer j.wg.Done()
	tick := time.NewTicker(idleRotate / 3)
	defer tick.Stop()
	adopt := time.NewTicker(adoptEvery)
	defer adopt.Stop()
	for {
		select {
		case p := <-j.todo:
			j.storeOne(p)
		case <-adopt.C:
			// Journals no process holds: a flock on one of ours fails
			// too (locks belong to the open file), so ours are left.
			if err := j.replay(context.Background(), filepath.Join(j.Root, journalDir)); err != nil {
				j.log.Warn("journal: storing what an ended process journaled", "err", err)
			}
		case <-tick.C:
			j.mu.Lock()
			if a := j.active; !j.closed && a.end > 0 && len(j.pending) == 0 && time.Since(a.used) >= idleRotate {
				if _, err := j.rotate(); err != nil {
					j.log.Warn("journal: starting a fresh journal", "err", err)
				}
			}
			j.mu.Unlock()
		case <-j.done:
			for {
				select {
				case p := <-j.todo:
					j.storeOne(p)
				default:
					return
				}
			}
		}
	}
}

// storeOne stores p in the Dir. When the disk refuses, p is tried again
// a second later (it is safe in the journal meanwhile), after the others:
// one object that cannot be stored holds up no other.
func (j *Journaled) storeOne(p *pendingObject) {
	j.storeMu.Lock()
	j.mu.Lock()
	current := j.pending[p.name] == p
	j.mu.Unlock()
	var err error
	if current { // else deleted or replaced meanwhile
		_, err = j.Dir.Put(context.Background(), p.name, bytes.NewReader(p.data))
	}
	j.storeMu.Unlock()
	if err == nil {
		j.forget(p)
		return
	}
	j.log.Warn("journal: storing a journaled object failed; trying again in a second", "object", p.name, "err", err)
	time.AfterFunc(time.Second, func() {
		select {
		case j.todo <- p:
		case <-j.done: // replayed at the next start
		}
	})
}

// forget drops p from memory and its segment's count.
func (j *Journaled) forget(p *pendingObject) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending[p.name] == p {
		delete(j.pending, p.name)
	}
	p.seg.pending--
	if p.seg.sealed && p.seg.pending == 0 {
		j.remove(p.seg)
	}
}

func (j *Journaled) remove(seg *segment) {
	seg.f.Close()
	if err := os.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		j.log.Warn("journal: removing a stored journal", "file", seg.path, "err", err)
	}
	j.own.Delete(seg.path)
}

// Get reads a journaled object from memory until it is in the Dir; one
// another running process (another replica) journaled and has not stored
// yet, from that process's journal, as Dir.Get does.
func (j *Journaled) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if clean, err := cleanName(name); err == nil {
		j.mu.Lock()
		p := j.pending[clean]
		j.mu.Unlock()
		if p != nil {
			return io.NopCloser(bytes.NewReader(p.data)), nil
		}
	}
	return j.Dir.getOrJournaled(ctx, name, func(path string) bool {
		_, mine := j.own.Load(path)
		return mine
	})
}

// List lists the Dir's objects and those still in the journal.
func (j *Journaled) List(ctx context.Context, prefix string) ([]Object, error) {
	// What waits in the journal is read before the Dir: an object the
	// flush moves from the journal to the Dir while the Dir is listed is
	// then in one or the other (read after, it could be in neither).
	j.mu.Lock()
	waiting := map[string]Object{}
	for name, p := range j.pending {
		if strings.HasPrefix(name, prefix) {
			waiting[name] = Object{Name: name, Size: int64(len(p.data)), SHA256: p.sum, Modified: p.at}
		}
	}
	j.mu.Unlock()
	out, err := j.Dir.list(ctx, prefix)
	if err != nil {
		return nil, err
	}
	// What waits in the journal is newer than what the Dir holds.
	out = slices.DeleteFunc(out, func(o Object) bool { _, ok := waiting[o.Name]; return ok })
	for _, o := range waiting {
		out = append(out, o)
	}
	sortByName(out)
	return out, nil
}

// Delete removes name from memory and the Dir. (A crash within
// idleRotate of the delete may bring a journaled object back from the
// journal's replay.)
func (j *Journaled) Delete(ctx context.Context, name string) error {
	j.storeMu.Lock()
	defer j.storeMu.Unlock()
	if clean, err := cleanName(name); err == nil {
		j.mu.Lock()
		if p := j.pending[clean]; p != nil {
			delete(j.pending, clean)
		}
		j.mu.Unlock()
	}
	return j.Dir.Delete(ctx, name)
}

// PutLazily writes to the Dir directly: a lazy object needs no journal.
func (j *Journaled) PutLazily(ctx context.Context, name string, r io.Reader) (Object, error) {
	return j.Dir.PutLazily(ctx, name, r)
}

// Unstored is how many journaled objects are not in the Dir yet.
func (j *Journaled) Unstored() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending)
}

// Flush waits until every object journaled so far is in the Dir.
func (j *Journaled) Flush(ctx context.Context) error {
	for {
		j.mu.Lock()
		n := len(j.pending)
		j.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close stores what is journaled and releases the journal.
func (j *Journaled) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.done)
	j.wg.Wait()
	j.mu.Lock()
	defer j.mu.Unlock()
	a := j.active
	a.sealed = true
	if a.pending == 0 {
		j.remove(a)
	} else {
		a.f.Close() // what is left is replayed at the next start
	}
	return nil
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func encodeRecord(name string, data []byte) []byte {
	rec := make([]byte, recordHeader+len(name)+len(data))
	binary.LittleEndian.PutUint32(rec[0:], recordMagic)
	binary.LittleEndian.PutUint16(rec[4:], uint16(len(name)))
	binary.LittleEndian.PutUint32(rec[6:], uint32(len(data)))
	copy(rec[recordHeader:], name)
	copy(rec[recordHeader+len(name):], data)
	binary.LittleEndian.PutUint32(rec[10:], crc32.Checksum(rec[recordHeader:], castagnoli))
	return rec
}

// records reads a journal's records up to the first one that is not whole
// (the zeros after the last, or a write a crash cut short).
func records(b []byte, each func(name string, data []byte)) {
	for len(b) >= recordHeader && binary.LittleEndian.Uint32(b) == recordMagic {
		nl, dl := int(binary.LittleEndian.Uint16(b[4:])), int(binary.LittleEndian.Uint32(b[6:]))
		if len(b) < recordHeader+nl+dl || crc32.Checksum(b[recordHeader:recordHeader+nl+dl], castagnoli) != binary.LittleEndian.Uint32(b[10:]) {
			return
		}
		each(string(b[recordHeader:recordHeader+nl]), b[recordHeader+nl:recordHeader+nl+dl])
		b = b[recordHeader+nl+dl:]
	}
}

// journaledRecord is an object as a journal holds it.
type journaledRecord struct {
	data     []byte
	modified time.Time
}

// journaled reads the journals under root: the newest record of each
// object, for a reader of the folder (another process than the one
// journaling) to see what is not stored in the folder yet.
func journaled(root string, skip func(path string) bool) map[string]journaledRecord {
	files, _ := filepath.Glob(filepath.Join(root, journalDir, "*.wal"))
	out := map[string]journaledRecord{}
	for _, p := range files { // named by creation time: oldest first
		if skip != nil && skip(p) {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue // removed meanwhile: stored
		}
		modified := time.Now()
		if st, err := os.Stat(p); err == nil {
			modified = st.ModTime()
		}
		records(b, func(name string, data []byte) {
			out[name] = journaledRecord{data: data, modified: modified}
		})
	}
	return out
}

// replay stores the objects of every journal nobody holds that the Dir
// lacks, then removes the journal.
func (j *Journaled) replay(ctx context.Context, dir string) error {
	// A journal a crash left half made holds nothing yet. One being made
	// now is not locked for the first instant after its creation, so
	// only one untouched for a minute is taken for left over.
	made, _ := filepath.Glob(filepath.Join(dir, "*.wal.new"))
	for _, p := range made {
		if st, err := os.Stat(p); err != nil || time.Since(st.ModTime()) < time.Minute {
			continue
		}
		if f, err := os.Open(p); err == nil {
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				_ = os.Remove(p)
			}
			f.Close()
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return err
	}
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // another process's, running
			continue
		}
		b, err := io.ReadAll(f)
		if err != nil {
			f.Close()
			return err
		}
		var failed error
		n := 0
		records(b, func(name string, data []byte) {
			if failed != nil {
				return
			}
			if _, err := os.Stat(filepath.Join(j.Root, filepath.FromSlash(name))); err == nil {
				return
			}
			if _, err := j.Dir.Put(ctx, name, bytes.NewReader(data)); err != nil {
				failed = err
			}
			n++
		})
		f.Close()
		if failed != nil {
			return fmt.Errorf("replaying journal %s: %w", p, failed)
		}
		if n > 0 {
			j.log.Info("journal: stored what an earlier run journaled but had not stored", "file", p, "objects", n)
		}
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return nil
}
