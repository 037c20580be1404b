// Package space watches how full etcd is against its --quota-backend-bytes
// and brings it back from the NOSPACE alarm. When the database outgrows the
// quota, etcd raises NOSPACE and refuses every write (the API server then
// answers "etcdserver: mvcc: database space exceeded") until an operator
// compacts, defragments and disarms the alarm: Pinterest's 2020 outage.
// Assess is the pure decision (how full, alert or not); Measure reads it
// from a live etcd; Recover is the way back, snapshot first.
package space

import (
	"context"
	"fmt"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultQuota is etcd's own default --quota-backend-bytes, assumed for
// an etcd older than 3.6 that does not report its quota.
const DefaultQuota int64 = 2 << 30

// DefaultWarnShare is the share of the quota at which the alert fires:
// early enough to compact and defragment before writes stop.
const DefaultWarnShare = 0.8

// Member is one etcd member's database as its Status reports it.
type Member struct {
	Name     string `json:"name"`
	ID       uint64 `json:"id"`
	Endpoint string `json:"endpoint"`
	Leader   bool   `json:"leader"`
	// DBSize is the database file's size: what etcd compares with the
	// quota. DBSizeInUse excludes the free pages a defragmentation
	// returns.
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	Quota       int64 `json:"quota"`
	Revision    int64 `json:"revision"`
	// Error is why the member did not answer; its sizes are then 0.
	Error string `json:"error,omitempty"`
}

// Space is the cluster's members and raised alarms.
type Space struct {
	Members []Member `json:"members"`
	// NoSpace lists the members with a raised NOSPACE alarm.
	NoSpace []uint64  `json:"noSpace,omitempty"`
	At      time.Time `json:"at"`
}

// Measure asks every member for its status and the cluster for its
// alarms. quota is used for a member that does not report its own
// (etcd before 3.6); 0 means etcd's default.
func Measure(ctx context.Context, cli *clientv3.Client, quota int64) (Space, error) {
	s := Space{At: time.Now()}
	members, err := cli.MemberList(ctx)
	if err != nil {
		return s, fmt.Errorf("etcd member list: %w", err)
	}
	for _, m := range members.Members {
		mem := Member{Name: m.Name, ID: m.ID}
		if len(m.ClientURLs) == 0 {
			mem.Error = "the member advertises no client URL (not started yet?)"
			s.Members = append(s.Members, mem)
			continue
		}
		mem.Endpoint = m.ClientURLs[0]
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := cli.Status(sctx, mem.Endpoint)
		cancel()
		if err != nil {
			mem.Error = err.Error()
			s.Members = append(s.Members, mem)
			continue
		}
		fill(&mem, st, quota)
		s.Members = append(s.Members, mem)
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		return s, fmt.Errorf("etcd alarm list: %w", err)
	}
	for _, a := range alarms.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			s.NoSpace = append(s.NoSpace, a.MemberID)
		}
	}
	return s, nil
}

func fill(m *Member, st *clientv3.StatusResponse, quota int64) {
	m.DBSize, m.DBSizeInUse = st.DbSize, st.DbSizeInUse
	m.Leader = st.Leader == st.Header.MemberId
	m.Revision = st.Header.Revision
	m.Quota = st.DbSizeQuota
	if m.Quota == 0 {
		m.Quota = quota
	}
	if m.Quota == 0 {
		m.Quota = DefaultQuota
	}
}

// Level is how close etcd is to refusing writes.
type Level string

const (
	// OK: under the warning share on every member.
	OK Level = "OK"
	// Warning: a member's database is at or past the warning share of its
	// quota; compact and defragment now, while writes still go through.
	Warning Level = "Warning"
	// NoSpace: the NOSPACE alarm is raised; etcd refuses every write.
	NoSpace Level = "NoSpace"
)

// Verdict is what Assess decided.
type Verdict struct {
	Level Level `json:"level"`
	// Share is the fullest member's database size over its quota.
	Share float64 `json:"share"`
	// Fullest is that member.
	Fullest Member `json:"fullest"`
}

// Assess says how full etcd is: NoSpace once an alarm is raised (whatever
// the sizes: a defragmented member stays read-only until disarmed),
// Warning from warnShare of the quota on the fullest member (etcd checks
// each member's own file against its quota), else OK.
func Assess(s Space, warnShare float64) Verdict {
	var v Verdict
	for _, m := range s.Members {
		if m.Quota <= 0 || m.Error != "" {
			continue
		}
		if share := float64(m.DBSize) / float64(m.Quota); share > v.Share {
			v.Share, v.Fullest = share, m
		}
	}
	switch {
	case len(s.NoSpace) > 0:
		v.Level = NoSpace
	case v.Share >= warnShare:
		v.Level = Warning
	default:
		v.Level = OK
	}
	return v
}

// leaderLast orders members for defragmentation: one at a time, the
// leader last, so the cluster keeps a leader that is not blocked while
// the followers are defragmented, and changes leader at most once.
func leaderLast(members []Member) []Member {
	out := slices.Clone(members)
	slices.SortStableFunc(out, func(a, b Member) int {
		switch {
		case a.Leader == b.Leader:
			return 0
		case a.Leader:
			return 1
		default:
			return -1
		}
	})
	return out
}

// MiB formats bytes for the people reading Recover's steps.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
