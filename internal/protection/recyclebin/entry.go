// Package recyclebin keeps copies of deleted objects off the cluster's
// etcd, in a storage.Store (a directory or an S3-compatible bucket), and
// plans their restore. It is the store and the restore side of the recycle
// bin (issue 14); the admission webhook that captures a copy before a
// delete is admitted, and the watch that catches deletes outside the API,
// write through it.
//
// An entry is one JSON document per deleted object version: what it was,
// who deleted it, how, and the object as it was last seen. Secrets are
// kept encrypted (AES-256-GCM, key in Key); nothing of an object goes to a
// log.
package recyclebin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/internal/operations/restore"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// How an object left the cluster.
const (
	// HowAPI is a delete admitted by the API server (captured before it
	// was admitted).
	HowAPI = "API"
	// HowOutsideAPI is an object that vanished without an admitted delete
	// (removed from etcd directly, or an older snapshot restored): kept
	// from the last state seen.
	HowOutsideAPI = "DeletedOutsideAPI"
)

// What became of a captured delete.
const (
	// StateCaptured: the copy is stored and the delete admitted by
	// Rampart; whether it then happened is not known yet (another webhook
	// may still refuse it).
	StateCaptured = "Captured"
	// StateDeleted: the object was seen gone after the capture.
	StateDeleted = "Deleted"
	// StateNotDeleted: the object was seen alive after the capture (the
	// delete was refused or failed later): never offered as deleted.
	StateNotDeleted = "NotDeleted"
)

// Entry is one kept copy.
type Entry struct {
	// Resource is the object's resource, at the version its Object is in.
	Resource  schema.GroupVersionResource `json:"resource"`
	Kind      string                      `json:"kind"`
	Namespace string                      `json:"namespace,omitempty"`
	Name      string                      `json:"name"`
	UID       types.UID                   `json:"uid"`
	DeletedAt time.Time                   `json:"deletedAt"`
	// DeletedBy is the user the API server named in the request (empty
	// outside the API).
	DeletedBy string `json:"deletedBy,omitempty"`
	How       string `json:"how"`
	// Policy is the RecyclePolicy that kept it; empty for an object kept
	// because Rampart protects it.
	Policy string `json:"policy,omitempty"`
	State  string `json:"state"`
	// Object is the object as it was (JSON); empty when Encrypted.
	Object json.RawMessage `json:"object,omitempty"`
	// Encrypted is the object sealed with the key KeyID names (Secrets).
	Encrypted []byte `json:"encrypted,omitempty"`
	KeyID     string `json:"keyID,omitempty"`
}

// Described names the entry as kubectl does: resource.group/name in
// namespace.
func (e *Entry) Described() string {
	gr := e.Resource.GroupResource().String()
	if e.Namespace == "" {
		return gr + "/" + e.Name
	}
	return gr + "/" + e.Name + " in namespace " + e.Namespace
}

// Item is the kept object, for a restore.
func (e *Entry) Item() restore.Item {
	return restore.Item{Resource: e.Resource, Namespace: e.Namespace, Name: e.Name, UID: e.UID, Object: e.Object}
}

// Owners are the ownerReferences of the kept object.
func (e *Entry) Owners() []metav1.OwnerReference {
	it := e.Item()
	return it.Owners()
}

// PlanRestore plans the restore of kept copies.
func PlanRestore(entries []Entry, o restore.Options) (*restore.Plan, error) {
	items := make([]restore.Item, len(entries))
	for i := range entries {
		items[i] = entries[i].Item()
	}
	return restore.PlanRestore(items, o)
}

// clusterScope stands for "no namespace" in a store name: no namespace
// can be called so (an underscore is not allowed in one).
const clusterScope = "_cluster"

// entriesPrefix holds every entry.
const entriesPrefix = "entries/"

// StoreName is where an entry is kept: by namespace and resource, then
// name, deletion time and UID, so that one object's versions list
// together and a name deleted twice is kept twice. Copies of one resource
// share a folder: a capture then makes no folder (a new folder costs
// another sync before the delete may be admitted). An object's name holds
// no "@" (a DNS subdomain or label), so it separates the name.
func StoreName(e *Entry) string {
	ns := e.Namespace
	if ns == "" {
		ns = clusterScope
	}
	return entriesPrefix + path.Join(ns, e.Resource.GroupResource().String(),
		e.Name+"@"+strconv.FormatInt(e.DeletedAt.UTC().UnixNano(), 10)+"-"+string(e.UID)+".json")
}

// Bin is the recycle bin over a store.
type Bin struct {
	Store storage.Store
	// Key seals Secrets; nil refuses to keep one (a Secret is never
	// stored in clear).
	Key *Key
}

// ErrNoKey is returned when a Secret is kept with no key to seal it.
var ErrNoKey = errors.New("a Secret is kept only encrypted, and the recycle bin has no key (--recycle-bin-key-file)")

// Put stores e durably (the store's Put returns once the content is
// synced) and returns its name. A Secret's object is sealed first.
func (b *Bin) Put(ctx context.Context, e Entry) (string, error) {
	if e.Resource.GroupResource() == (schema.GroupResource{Resource: "secrets"}) && len(e.Object) > 0 {
		if b.Key == nil {
			return "", ErrNoKey
		}
		sealed, err := b.Key.Seal(e.Object, []byte(e.UID))
		if err != nil {
			return "", err
		}
		e.Encrypted, e.KeyID, e.Object = sealed, b.Key.ID(), nil
	}
	raw, err := json.Marshal(&e)
	if err != nil {
		return "", err
	}
	name := StoreName(&e)
	if _, err := b.Store.Put(ctx, name, bytes.NewReader(raw)); err != nil {
		return "", err
	}
	return name, nil
}

// Get reads the entry stored under name, with its object opened.
func (b *Bin) Get(ctx context.Context, name string) (Entry, error) {
	r, err := b.Store.Get(ctx, name)
	if err != nil {
		return Entry{}, err
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %w", name, err)
	}
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return Entry{}, fmt.Errorf("%s: not a recycle bin entry: %w", name, err)
	}
	if err := b.settled(ctx, name, &e); err != nil {
		return Entry{}, err
	}
	if len(e.Encrypted) > 0 {
		if b.Key == nil || b.Key.ID() != e.KeyID {
			return e, fmt.Errorf("%s is sealed with key %s, which the recycle bin does not have", name, e.KeyID)
		}
		if e.Object, err = b.Key.Open(e.Encrypted, []byte(e.UID)); err != nil {
			return e, fmt.Errorf("%s: %w", name, err)
		}
		e.Encrypted = nil
	}
	return e, nil
}

// peek reads what an entry says of itself, leaving a sealed object
// sealed (no key needed).
func (b *Bin) peek(ctx context.Context, name string) (Entry, error) {
	r, err := b.Store.Get(ctx, name)
	if err != nil {
		return Entry{}, err
	}
	defer r.Close()
	var e Entry
	if err := json.NewDecoder(r).Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("%s: not a recycle bin entry: %w", name, err)
	}
	return e, b.settled(ctx, name, &e)
}

// stateSuffix names the marker that records what became of a capture
// beside its entry: an entry is written once and never rewritten, so a
// reader never meets one half replaced.
const stateSuffix = ".state"

// Settle records what became of the capture stored under name. The marker
// is written lazily (storage.PutLazily): it is not worth a synced write on
// a disk that the next delete's capture waits for, since a marker a crash
// loses is only a capture settled again (Keeper.Start resumes those of the
// last day) and one it garbles reads as absent.
func (b *Bin) Settle(ctx context.Context, name, state string) error {
	_, err := storage.PutLazily(ctx, b.Store, name+stateSuffix, strings.NewReader(state))
	return err
}

// settled reads the state recorded beside the entry, if any, into e.
func (b *Bin) settled(ctx context.Context, name string, e *Entry) error {
	r, err := b.Store.Get(ctx, name+stateSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	state, err := io.ReadAll(r)
	if errors.Is(err, storage.ErrChecksum) {
		return nil // a marker a crash cut short: not settled yet
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name+stateSuffix, err)
	}
	e.State = string(state)
	return nil
}

// Listed is an entry as List finds it: its name in the store and what the
// name says, without reading it.
type Listed struct {
	StoreName string
	Namespace string
	Resource  schema.GroupResource
	Name      string
	DeletedAt time.Time
	UID       types.UID
	Size      int64
}

// Versions lists the entries of one object (namespace "" for a
// cluster-scoped one), newest first, reading only those.
func (b *Bin) Versions(ctx context.Context, namespace string, gr schema.GroupResource, name string) ([]Listed, error) {
	ns := namespace
	if ns == "" {
		ns = clusterScope
	}
	return b.list(ctx, entriesPrefix+path.Join(ns, gr.String(), name)+"@")
}

// List lists the entries of a namespace ("" for every namespace and the
// cluster-scoped objects), newest first.
func (b *Bin) List(ctx context.Context, namespace string) ([]Listed, error) {
	prefix := entriesPrefix
	if namespace != "" {
		prefix += namespace + "/"
	}
	return b.list(ctx, prefix)
}

// list lists the entries whose names start with prefix, newest first.
func (b *Bin) list(ctx context.Context, prefix string) ([]Listed, error) {
	objs, err := b.Store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []Listed
	for _, o := range objs {
		l, ok := parseName(o.Name)
		if !ok {
			continue
		}
		l.Size = o.Size
		out = append(out, l)
	}
	// Newest first: a restore usually wants the last copy.
	slices.SortStableFunc(out, func(a, b Listed) int { return b.DeletedAt.Compare(a.DeletedAt) })
	return out, nil
}

func parseName(name string) (Listed, bool) {
	rest, ok := strings.CutPrefix(name, entriesPrefix)
	if !ok {
		return Listed{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || !strings.HasSuffix(parts[2], ".json") {
		return Listed{}, false
	}
	object, version, ok := strings.Cut(strings.TrimSuffix(parts[2], ".json"), "@")
	if !ok {
		return Listed{}, false
	}
	stamp, uid, ok := strings.Cut(version, "-")
	if !ok {
		return Listed{}, false
	}
	nanos, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return Listed{}, false
	}
	ns := parts[0]
	if ns == clusterScope {
		ns = ""
	}
	return Listed{StoreName: name, Namespace: ns, Resource: schema.ParseGroupResource(parts[1]), Name: object,
		DeletedAt: time.Unix(0, nanos).UTC(), UID: types.UID(uid)}, true
}
