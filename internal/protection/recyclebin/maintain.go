package recyclebin

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"k8s.io/utils/clock"
)

// Limits are how long a policy's copies are kept and how much they may
// take; MaxBytes 0 is no cap.
type Limits struct {
	Retention time.Duration
	MaxBytes  int64
}

// Summary is what the bin holds, as `rampart status` shows it.
type Summary struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// ByState counts entries by State, ByHow by How.
	ByState map[string]int `json:"byState"`
	ByHow   map[string]int `json:"byHow"`
	// Newest is when the newest kept object was deleted.
	Newest time.Time `json:"newest,omitzero"`
	// Evicted in the pass that made the summary, by reason.
	Evicted map[string]int `json:"evicted,omitempty"`
	At      time.Time      `json:"at"`
}

// Why an entry was evicted.
const (
	EvictedRetention = "retention"
	EvictedSize      = "size"
)

// Maintainer evicts what retention and size caps no longer keep, and sums
// up what is left. One replica runs it (the leader).
type Maintainer struct {
	Bin   *Bin
	Clock clock.Clock
	Log   *slog.Logger
	// LimitsOf gives the limits of the RecyclePolicy named (and of
	// protected objects, for ""); ok false for a policy that is gone,
	// whose copies then keep the default limits.
	LimitsOf func(policy string) (l Limits, ok bool)
	// Default applies to protected objects and to copies of policies
	// that are gone.
	Default Limits

	// index remembers what each entry says (entries change only from
	// Captured to a settled state), so a pass reads only new ones.
	index map[string]indexed
}

type indexed struct {
	policy, state, how string
}

// Pass evicts and sums up, once.
func (m *Maintainer) Pass(ctx context.Context) (Summary, error) {
	listed, err := m.Bin.List(ctx, "")
	if err != nil {
		return Summary{}, err
	}
	if m.index == nil {
		m.index = map[string]indexed{}
	}
	now := m.Clock.Now()
	live := make(map[string]bool, len(listed))
	// Oldest first, so that a size cap evicts the oldest.
	slices.SortFunc(listed, func(a, b Listed) int { return a.DeletedAt.Compare(b.DeletedAt) })
	byPolicy := map[string][]Listed{}
	for _, l := range listed {
		live[l.StoreName] = true
		ix, ok := m.index[l.StoreName]
		if !ok || ix.state == StateCaptured {
			e, err := m.Bin.peek(ctx, l.StoreName)
			if err != nil {
				m.Log.Warn("recycle bin: reading an entry", "entry", l.StoreName, "err", err)
				continue
			}
			ix = indexed{policy: e.Policy, state: e.State, how: e.How}
			m.index[l.StoreName] = ix
		}
		byPolicy[ix.policy] = append(byPolicy[ix.policy], l)
	}
	for name := range m.index {
		if !live[name] {
			delete(m.index, name)
		}
	}
	s := Summary{ByState: map[string]int{}, ByHow: map[string]int{}, Evicted: map[string]int{}, At: now}
	for policy, entries := range byPolicy {
		lim, ok := m.LimitsOf(policy)
		if !ok {
			lim = m.Default
		}
		var total int64
		for _, l := range entries {
			total += l.Size
		}
		for _, l := range entries {
			reason := ""
			switch {
			case lim.Retention > 0 && now.Sub(l.DeletedAt) > lim.Retention:
				reason = EvictedRetention
			case lim.MaxBytes > 0 && total > lim.MaxBytes:
				reason = EvictedSize
			}
			if reason != "" {
				err := m.Bin.Store.Delete(ctx, l.StoreName)
				if err == nil {
					err = m.Bin.Store.Delete(ctx, l.StoreName+stateSuffix)
				}
				if err != nil {
					m.Log.Warn("recycle bin: evicting an entry", "entry", l.StoreName, "err", err)
				} else {
					s.Evicted[reason]++
					evictions.WithLabelValues(reason).Inc()
					total -= l.Size
					delete(m.index, l.StoreName)
					continue
				}
			}
			ix := m.index[l.StoreName]
			s.Entries++
			s.Bytes += l.Size
			s.ByState[ix.state]++
			s.ByHow[ix.how]++
			if l.DeletedAt.After(s.Newest) {
				s.Newest = l.DeletedAt
			}
		}
	}
	storedEntries.Set(float64(s.Entries))
	storedBytes.Set(float64(s.Bytes))
	return s, nil
}
