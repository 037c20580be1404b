package space

import (
	"cmp"
	"slices"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/etcdkey"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
)

// Grown is a key prefix (/registry/RESOURCE/NAMESPACE/) and what was
// written under it since a revision.
type Grown struct {
	Prefix string `json:"prefix"`
	// Keys were created or rewritten since the revision; Bytes is their
	// size now. Each rewrite left at least one older revision of about
	// that size in etcd until the next compaction, so Bytes is a lower
	// bound of what the prefix added to the database.
	Keys  int   `json:"keys"`
	Bytes int64 `json:"bytes"`
}

// Writes counts, per key prefix, the live keys written after a revision:
// both what grows the latest values (creates) and what grows history
// (rewrites of the same keys, which a size-only breakdown cannot see).
// Fed by source.WalkLive; one small record per prefix.
type Writes struct {
	since int64
	by    map[string]*Grown
}

// NewWrites counts writes after revision since (0: every live key, the
// first look).
func NewWrites(since int64) *Writes { return &Writes{since: since, by: map[string]*Grown{}} }

// Add counts one key if it was written after the revision.
func (w *Writes) Add(e source.Entry) error {
	if e.ModRevision <= w.since {
		return nil
	}
	p := etcdkey.PrefixOf(string(e.Key))
	g := w.by[p]
	if g == nil {
		g = &Grown{Prefix: p}
		w.by[p] = g
	}
	g.Keys++
	g.Bytes += int64(len(e.Key) + len(e.Value))
	return nil
}

// Top is the n prefixes with the most bytes written, most first.
func (w *Writes) Top(n int) []Grown {
	out := make([]Grown, 0, len(w.by))
	for _, g := range w.by {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Grown) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Prefix, b.Prefix))
	})
	return out[:min(n, len(out))]
}
