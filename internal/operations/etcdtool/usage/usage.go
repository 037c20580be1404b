// Package usage says what fills an etcd store: bytes and counts by
// resource, namespace and key prefix, the latest revision against every
// revision kept, and the largest objects. It is fed one revision at a time
// (see package source) and keeps one small record per key, never a value.
package usage

import (
	"cmp"
	"slices"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/etcdkey"
	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
)

// Group is the usage of a set of keys.
type Group struct {
	Name string `json:"name"`
	// Keys counts live keys; LatestBytes is their key and value bytes at
	// the latest revision.
	Keys        int   `json:"keys"`
	LatestBytes int64 `json:"latestBytes"`
	// Revisions and AllBytes count every revision kept, deletes and keys
	// since deleted included: what compaction would reclaim is AllBytes
	// minus LatestBytes.
	Revisions int   `json:"revisions"`
	AllBytes  int64 `json:"allBytes"`
}

// Object is one live key.
type Object struct {
	Key       string `json:"key"`
	Bytes     int64  `json:"bytes"`
	Revisions int    `json:"revisions"`
}

// Report is the usage of a store.
type Report struct {
	Source string `json:"source"`
	// Revision is the newest revision seen.
	Revision int64 `json:"revision"`
	// AllRevisions is false for a live etcd, whose history the client API
	// does not list: the "all" figures then equal the latest ones.
	AllRevisions bool     `json:"allRevisions"`
	Total        Group    `json:"total"`
	Resources    []Group  `json:"resources"`
	Namespaces   []Group  `json:"namespaces"`
	Prefixes     []Group  `json:"prefixes"`
	Largest      []Object `json:"largest"`
	Stacks       []Stack  `json:"-"`
}

// Stack is one line of folded stacks: frames and the latest bytes under
// them.
type Stack struct {
	Frames []string
	Bytes  int64
}

type keyStat struct {
	latestBytes int64
	latestRev   int64
	revisions   int
	allBytes    int64
	deleted     bool
}

// Counter accumulates revisions. Its memory grows with the number of
// distinct keys, not with their values.
type Counter struct {
	keys    map[string]*keyStat
	maxRev  int64
	history bool
}

// NewCounter starts a count; history says the entries include every
// revision kept (a snapshot), not only the latest (a live etcd).
func NewCounter(history bool) *Counter {
	return &Counter{keys: map[string]*keyStat{}, history: history}
}

// Add counts one revision. Entries of a key come oldest first.
func (c *Counter) Add(e source.Entry) error {
	s := c.keys[string(e.Key)]
	if s == nil {
		s = &keyStat{}
		c.keys[string(e.Key)] = s
	}
	s.revisions++
	s.allBytes += int64(e.Stored)
	if e.ModRevision >= s.latestRev {
		s.latestRev = e.ModRevision
		s.deleted = e.Tombstone
		s.latestBytes = int64(len(e.Key) + len(e.Value))
	}
	c.maxRev = max(c.maxRev, e.ModRevision)
	return nil
}

// Report sums the counts; top is the number of largest objects listed.
func (c *Counter) Report(src string, top int) Report {
	r := Report{Source: src, Revision: c.maxRev, AllRevisions: c.history, Total: Group{Name: "total"}}
	res, ns, pre := map[string]*Group{}, map[string]*Group{}, map[string]*Group{}
	type nsKey struct{ res, ns string }
	stacks := map[nsKey]int64{}
	var largest []Object
	add := func(m map[string]*Group, name string, s *keyStat) {
		g := m[name]
		if g == nil {
			g = &Group{Name: name}
			m[name] = g
		}
		count(g, s)
	}
	for k, s := range c.keys {
		key := etcdkey.Parse(k)
		count(&r.Total, s)
		add(res, key.Resource, s)
		nsName := key.Namespace
		if nsName == "" {
			nsName = "(cluster-scoped)"
		}
		add(ns, nsName, s)
		add(pre, etcdkey.PrefixOf(k), s)
		if !s.deleted {
			stacks[nsKey{key.Resource, key.Namespace}] += s.latestBytes
			largest = topN(largest, Object{Key: k, Bytes: s.latestBytes, Revisions: s.revisions}, top)
		}
	}
	r.Resources, r.Namespaces, r.Prefixes = sorted(res), sorted(ns), sorted(pre)
	slices.SortFunc(largest, func(a, b Object) int { return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(a.Key, b.Key)) })
	r.Largest = largest
	for k, b := range stacks {
		frames := []string{k.res}
		if k.ns != "" {
			frames = append(frames, k.ns)
		}
		r.Stacks = append(r.Stacks, Stack{Frames: frames, Bytes: b})
	}
	slices.SortFunc(r.Stacks, func(a, b Stack) int { return slices.Compare(a.Frames, b.Frames) })
	return r
}

func count(g *Group, s *keyStat) {
	g.Revisions += s.revisions
	g.AllBytes += s.allBytes
	if !s.deleted {
		g.Keys++
		g.LatestBytes += s.latestBytes
	}
}

// topN keeps the n largest objects; n is small, so a sorted slice does.
func topN(l []Object, o Object, n int) []Object {
	if n <= 0 {
		return l
	}
	if len(l) == n && o.Bytes <= l[n-1].Bytes {
		return l
	}
	i, _ := slices.BinarySearchFunc(l, o, func(a, b Object) int { return cmp.Compare(b.Bytes, a.Bytes) })
	l = slices.Insert(l, i, o)
	if len(l) > n {
		l = l[:n]
	}
	return l
}

func sorted(m map[string]*Group) []Group {
	out := make([]Group, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Group) int {
		return cmp.Or(cmp.Compare(b.LatestBytes, a.LatestBytes), cmp.Compare(b.AllBytes, a.AllBytes), cmp.Compare(a.Name, b.Name))
	})
	return out
}
