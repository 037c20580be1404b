package check

import (
	"context"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
)

// Summary is the outcome of a walk: counts by status, and every value not
// OK (undecodable or not checked), sorted by key.
type Summary struct {
	Revision int64          `json:"revision"`
	Counts   map[Status]int `json:"counts"`
	Problems []Result       `json:"problems"`
}

func (s *Summary) add(r Result) {
	s.Counts[r.Status]++
	if r.Status != OK {
		s.Problems = append(s.Problems, r)
	}
}

// Snapshot checks the latest value of every key under prefix in a snapshot
// file. The first pass finds each key's latest revision; the second decodes
// only those, one at a time.
func Snapshot(ctx context.Context, c *Checker, path, prefix string) (Summary, error) {
	type latest struct {
		rev     int64
		deleted bool
	}
	keys := map[string]latest{}
	sum := Summary{Counts: map[Status]int{}}
	err := source.WalkSnapshot(path, func(e source.Entry) error {
		if strings.HasPrefix(string(e.Key), prefix) {
			keys[string(e.Key)] = latest{e.ModRevision, e.Tombstone}
		}
		sum.Revision = max(sum.Revision, e.ModRevision)
		return nil
	})
	if err != nil {
		return sum, err
	}
	err = source.WalkSnapshot(path, func(e source.Entry) error {
		l, ok := keys[string(e.Key)]
		if !ok || l.deleted || l.rev != e.ModRevision || e.Tombstone {
			return nil
		}
		r := c.Check(ctx, string(e.Key), e.Value)
		r.ModRevision = e.ModRevision
		sum.add(r)
		return ctx.Err()
	})
	sortResults(sum.Problems)
	return sum, err
}

// Live checks the latest value of every key under prefix in a live etcd.
func Live(ctx context.Context, c *Checker, cli *clientv3.Client, prefix string) (Summary, error) {
	sum := Summary{Counts: map[Status]int{}}
	rev, err := source.WalkLive(ctx, cli, prefix, func(e source.Entry) error {
		r := c.Check(ctx, string(e.Key), e.Value)
		r.ModRevision = e.ModRevision
		sum.add(r)
		return nil
	})
	sum.Revision = rev
	sortResults(sum.Problems)
	return sum, err
}

func sortResults(rs []Result) {
	slices.SortFunc(rs, func(a, b Result) int { return strings.Compare(a.Key, b.Key) })
}
