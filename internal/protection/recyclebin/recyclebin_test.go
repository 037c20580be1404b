package recyclebin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secrets    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

func testKey(t *testing.T, b byte) *Key {
	t.Helper()
	k, err := NewKey(bytes.Repeat([]byte{b}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Entries go in and come out as they were, listed newest first; the same
// name deleted twice is kept twice.
func TestBinKeepsEveryDeletedVersion(t *testing.T) {
	ctx := context.Background()
	bin := &Bin{Store: storage.Dir{Root: t.TempDir()}}
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for i, uid := range []string{"uid-1", "uid-2"} {
		e := Entry{Resource: configMaps, Kind: "ConfigMap", Namespace: "shop", Name: "prices", UID: types.UID(uid),
			DeletedAt: at.Add(time.Duration(i) * time.Minute), DeletedBy: "alice", How: HowAPI, State: StateCaptured,
			Object: json.RawMessage(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"prices","namespace":"shop","uid":"` + uid + `"},"data":{"v":"` + uid + `"}}`)}
		if _, err := bin.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	cluster := Entry{Resource: schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		Name: "widgets.example.com", UID: "uid-crd", DeletedAt: at, How: HowOutsideAPI, State: StateDeleted, Object: json.RawMessage(`{}`)}
	if _, err := bin.Put(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	shop, err := bin.List(ctx, "shop")
	if err != nil || len(shop) != 2 || shop[0].UID != "uid-2" || shop[1].UID != "uid-1" || shop[0].Resource.Resource != "configmaps" || shop[0].Name != "prices" {
		t.Fatalf("List(shop) = %+v, %v; want both versions, newest first", shop, err)
	}
	all, err := bin.List(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("List(all) = %+v, %v", all, err)
	}
	var crd *Listed
	for i := range all {
		if all[i].Name == "widgets.example.com" {
			crd = &all[i]
		}
	}
	if crd == nil || crd.Namespace != "" || crd.Resource.String() != "customresourcedefinitions.apiextensions.k8s.io" {
		t.Errorf("the cluster-scoped entry listed as %+v", crd)
	}
	got, err := bin.Get(ctx, shop[1].StoreName)
	if err != nil || got.DeletedBy != "alice" || got.How != HowAPI || !strings.Contains(string(got.Object), `"v":"uid-1"`) {
		t.Errorf("Get = %+v, %v", got, err)
	}
}

// A Secret is never stored in clear: sealed with the key, opened only with
// it, and refused when there is no key.
func TestSecretsAreSealed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	secret := Entry{Resource: secrets, Kind: "Secret", Namespace: "shop", Name: "db", UID: "uid-s", DeletedAt: time.Now(), How: HowAPI, State: StateCaptured,
		Object: json.RawMessage(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","namespace":"shop"},"data":{"password":"aHVudGVyMg=="}}`)}
	if _, err := (&Bin{Store: storage.Dir{Root: dir}}).Put(ctx, secret); !errors.Is(err, ErrNoKey) {
		t.Fatalf("a Secret with no key: %v, want ErrNoKey", err)
	}
	bin := &Bin{Store: storage.Dir{Root: dir}, Key: testKey(t, 1)}
	name, err := bin.Put(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("aHVudGVyMg")) || bytes.Contains(raw, []byte("password")) {
		t.Fatalf("the stored Secret holds its data in clear:\n%s", raw)
	}
	got, err := bin.Get(ctx, name)
	if err != nil || !strings.Contains(string(got.Object), `"password":"aHVudGVyMg=="`) {
		t.Fatalf("opened with the key: %s, %v", got.Object, err)
	}
	other := &Bin{Store: storage.Dir{Root: dir}, Key: testKey(t, 2)}
	if _, err := other.Get(ctx, name); err == nil || !strings.Contains(err.Error(), "sealed with key "+bin.Key.ID()) {
		t.Errorf("opened with another key: %v", err)
	}
	// A sealed copy is bound to its object: moved to another UID, it does
	// not open.
	if _, err := bin.Key.Open(mustSeal(t, bin.Key, []byte("x"), []byte("uid-a")), []byte("uid-b")); !errors.Is(err, ErrSealed) {
		t.Errorf("opened for another object: %v", err)
	}
}

func mustSeal(t *testing.T, k *Key, plain, ad []byte) []byte {
	t.Helper()
	s, err := k.Seal(plain, ad)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeySize(t *testing.T) {
	if _, err := NewKey([]byte("short")); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("a 5-byte key: %v", err)
	}
}

// Versions lists one object's copies only, newest first.
func TestBinVersionsListsOneObject(t *testing.T) {
	ctx := context.Background()
	bin := &Bin{Store: storage.Dir{Root: t.TempDir()}}
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for i, name := range []string{"prices", "prices", "prices-eu", "price"} {
		e := Entry{Resource: configMaps, Namespace: "shop", Name: name, UID: types.UID(fmt.Sprintf("uid-%d", i)), DeletedAt: at.Add(time.Duration(i) * time.Minute),
			How: HowAPI, State: StateDeleted, Object: json.RawMessage(`{}`)}
		if _, err := bin.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := bin.Versions(ctx, "shop", configMaps.GroupResource(), "prices")
	if err != nil || len(got) != 2 || got[0].UID != "uid-1" || got[1].UID != "uid-0" {
		t.Fatalf("Versions(prices) = %+v, %v; want its two copies, newest first, and no other object's", got, err)
	}
	if got, err := bin.Versions(ctx, "other", configMaps.GroupResource(), "prices"); err != nil || len(got) != 0 {
		t.Fatalf("Versions in a namespace with nothing kept = %+v, %v", got, err)
	}
}

// A settle marker is written lazily: one a crash left garbled reads as
// not settled yet, never as an entry that cannot be read.
func TestAGarbledSettleMarkerReadsAsNotSettled(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := &Bin{Store: storage.Dir{Root: root}}
	name, err := b.Put(ctx, Entry{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap",
		Namespace: "shop", Name: "prices", UID: "uid-1", State: StateCaptured, Object: []byte(`{"metadata":{"name":"prices"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Settle(ctx, name, StateDeleted); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Get(ctx, name); err != nil || e.State != StateDeleted {
		t.Fatalf("settled: %v, %v; want Deleted", e.State, err)
	}
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name+stateSuffix)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Get(ctx, name); err != nil || e.State != StateCaptured {
		t.Fatalf("with the marker emptied by a crash: %v, %v; want Captured, to be settled again", e.State, err)
	}
}
