package space

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/snapshot"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
)

// ErrNoVerifiedSnapshot is why Recover did nothing: compaction throws
// history away for good, so it is never done without a way back.
var ErrNoVerifiedSnapshot = errors.New("no verified snapshot: nothing was compacted, defragmented or disarmed")

// Recovery is how to bring etcd back from NOSPACE.
type Recovery struct {
	// Store receives the snapshot taken first (Location names it in the
	// output); Name is its name there, TmpDir where it is verified before.
	Store    storage.Store
	Location string
	Name     string
	TmpDir   string
	// Quota is assumed for members that do not report theirs (etcd < 3.6).
	Quota int64
	// WarnShare is the share of the quota still worth a warning after
	// recovery (DefaultWarnShare when 0).
	WarnShare float64
	// DefragTimeout bounds each member's defragmentation, which blocks
	// that member's reads and writes while it runs (default 5 minutes).
	DefragTimeout time.Duration
	// Out receives one line per step: what was done, what it saw.
	Out io.Writer
}

// Result is what a recovery did.
type Result struct {
	Before, After Space
	Snapshot      snapshot.Info
	// CompactedTo is the revision history was compacted to.
	CompactedTo int64
	// Disarmed counts the NOSPACE alarms disarmed.
	Disarmed int
}

// Run recovers: a verified snapshot in the store, compaction to the
// current revision, each member defragmented in turn (the leader last),
// the NOSPACE alarms disarmed. It stops at the first step that fails,
// saying what was done so far.
func (r Recovery) Run(ctx context.Context, cli *clientv3.Client) (Result, error) {
	var res Result
	out := r.Out
	if out == nil {
		out = io.Discard
	}
	warn := r.WarnShare
	if warn == 0 {
		warn = DefaultWarnShare
	}
	before, err := Measure(ctx, cli, r.Quota)
	if err != nil {
		return res, err
	}
	res.Before = before
	fmt.Fprintf(out, "1. measured: %s\n", Describe(before))

	if r.Store == nil {
		return res, fmt.Errorf("%w: name a store for it (--dir DIR or --store LOCATION)", ErrNoVerifiedSnapshot)
	}
	start := time.Now()
	info, err := snapshot.Save(ctx, cli, r.Store, r.Name, r.TmpDir)
	if err != nil {
		return res, fmt.Errorf("%w: the snapshot failed: %v (fix the store, or give another with room for %s, and run again)",
			ErrNoVerifiedSnapshot, err, MiB(largest(before)))
	}
	res.Snapshot = info
	fmt.Fprintf(out, "2. snapshot %s in %s: %s at revision %d, sha256 %s, verified (etcd hash, bbolt check, stored copy reads back) in %.1fs\n",
		info.Name, r.Location, MiB(info.Size), info.Revision, info.SHA256, time.Since(start).Seconds())

	rev := currentRevision(before)
	start = time.Now()
	_, err = cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		fmt.Fprintf(out, "3. compact: history was already compacted to revision %d or later; nothing older is kept\n", rev)
	case err != nil:
		return res, fmt.Errorf("compact to revision %d: %w (the snapshot %s is taken; run recover again)", rev, err, info.Name)
	default:
		fmt.Fprintf(out, "3. compacted history to revision %d (every older revision of every key dropped; the latest values kept) in %.1fs\n",
			rev, time.Since(start).Seconds())
	}
	res.CompactedTo = rev

	timeout := r.DefragTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	for i, m := range leaderLast(before.Members) {
		if m.Endpoint == "" || m.Error != "" {
			return res, fmt.Errorf("member %s did not answer (%s): defragment it when it is back: etcdctl defrag --endpoints URL, then run recover again", m.Name, m.Error)
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := cli.Defragment(dctx, m.Endpoint)
		cancel()
		if err != nil {
			return res, fmt.Errorf("defragment member %s (%s): %w (compaction is done; run recover again)", m.Name, m.Endpoint, err)
		}
		st, err := cli.Status(ctx, m.Endpoint)
		if err != nil {
			return res, fmt.Errorf("status of member %s after its defragmentation: %w", m.Name, err)
		}
		role := "follower"
		if m.Leader {
			role = "leader, last"
		}
		fmt.Fprintf(out, "4.%d defragmented member %s (%s, %s) in %.1fs: database %s -> %s (%s in use)\n",
			i+1, m.Name, m.Endpoint, role, time.Since(start).Seconds(), MiB(m.DBSize), MiB(st.DbSize), MiB(st.DbSizeInUse))
	}

	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		return res, fmt.Errorf("etcd alarm list: %w", err)
	}
	for _, a := range alarms.Alarms {
		if a.Alarm != pb.AlarmType_NOSPACE {
			continue
		}
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			return res, fmt.Errorf("disarm NOSPACE on member %x: %w (etcdctl alarm disarm does the same)", a.MemberID, err)
		}
		res.Disarmed++
	}
	if res.Disarmed > 0 {
		fmt.Fprintf(out, "5. disarmed %d NOSPACE alarm(s): etcd accepts writes again\n", res.Disarmed)
	} else {
		fmt.Fprintln(out, "5. no NOSPACE alarm was raised: nothing to disarm")
	}

	after, err := Measure(ctx, cli, r.Quota)
	if err != nil {
		return res, err
	}
	res.After = after
	v := Assess(after, warn)
	fmt.Fprintf(out, "6. measured: %s\n", Describe(after))
	switch {
	case v.Level == NoSpace:
		return res, errors.New("a NOSPACE alarm is raised again: the live data does not fit the quota; delete what `rampart etcd usage` shows growing, or raise --quota-backend-bytes on every member")
	case v.Share >= warn:
		fmt.Fprintf(out, "still %.0f%% of the quota after compaction and defragmentation: the latest values themselves fill it; delete what `rampart etcd usage` shows growing, or raise --quota-backend-bytes\n", 100*v.Share)
	}
	return res, nil
}

// currentRevision is the newest revision a member reported.
func currentRevision(s Space) int64 {
	var rev int64
	for _, m := range s.Members {
		rev = max(rev, m.Revision)
	}
	return rev
}

func largest(s Space) int64 {
	var b int64
	for _, m := range s.Members {
		b = max(b, m.DBSize)
	}
	return b
}

// Describe is one line per cluster: each member's size against its quota,
// and the alarms.
func Describe(s Space) string {
	line := ""
	for i, m := range s.Members {
		if i > 0 {
			line += "; "
		}
		if m.Error != "" {
			line += fmt.Sprintf("member %s did not answer: %s", m.Name, m.Error)
			continue
		}
		leader := ""
		if m.Leader {
			leader = ", leader"
		}
		line += fmt.Sprintf("member %s%s: database %s of %s quota (%.0f%%), %s in use, revision %d",
			m.Name, leader, MiB(m.DBSize), MiB(m.Quota), 100*float64(m.DBSize)/float64(max(m.Quota, 1)), MiB(m.DBSizeInUse), m.Revision)
	}
	if len(s.NoSpace) > 0 {
		line += fmt.Sprintf("; NOSPACE alarm raised on %d member(s): writes refused", len(s.NoSpace))
	} else {
		line += "; no NOSPACE alarm"
	}
	return line
}
