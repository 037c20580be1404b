// Package breaker is the gateway's circuit breaker: a sliding window of
// the API servers' answers (Window), the judgement of distress over it
// (Decide), and each policy's breaker state machine (Breaker). Everything
// here is pure: the clock is passed in.
package breaker

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// MaxSeconds is the longest window a trip may judge over
// (spec.breaker.trip.forSeconds is at most 600).
const MaxSeconds = 600

// Latencies are kept in a log-linear histogram: subBuckets per power of
// two of microseconds, so a percentile is known within 1/subBuckets
// (12.5%) at any scale from microseconds to minutes, in fixed memory.
// Written by hand: the libraries that do this (HdrHistogram) keep no
// sliding window, and Prometheus histograms keep no percentiles.
const (
	subBits    = 3
	subBuckets = 1 << subBits
	octaves    = 31 - subBits // up to 2^31 µs, 35 minutes; longer ones count as that
	numBuckets = (octaves + 1) * subBuckets
)

// bucketOf is the histogram bucket of a latency.
func bucketOf(d time.Duration) int {
	us := uint64(max(d.Microseconds(), 0))
	if us < subBuckets {
		return int(us)
	}
	// The top subBits+1 bits of us: the power of two and the sub-bucket.
	shift := bits.Len64(us) - subBits - 1
	i := (shift+1)*subBuckets + int(us>>shift) - subBuckets
	return min(i, numBuckets-1)
}

// bucketBounds is the range of latencies [lo, hi) of bucket i, in µs.
func bucketBounds(i int) (lo, hi float64) {
	if i < subBuckets {
		return float64(i), float64(i + 1)
	}
	shift := i/subBuckets - 1
	base := uint64(subBuckets+i%subBuckets) << shift
	return float64(base), float64(base + 1<<shift)
}

// second is one second of answers.
type second struct {
	unix       int64 // which second this is; stale buckets are reset on use
	answers    uint32
	errors     uint32 // 5xx
	tooMany    uint32 // 429
	short      uint32 // answers to short requests, whose latency is kept
	latencyHis [numBuckets]uint32
}

// Window holds the last MaxSeconds of the API servers' answers in
// per-second buckets, so that recording costs a lock and a few increments
// and judging costs a sum over the seconds judged. It is safe for
// concurrent use.
type Window struct {
	mu      sync.Mutex
	seconds [MaxSeconds]second
}

// Record notes one answer of the API servers at now: its HTTP code, its
// latency, and whether it was a long-running request (a watch: its
// latency says nothing).
func (w *Window) Record(now time.Time, code int, latency time.Duration, longRunning bool) {
	unix := now.Unix()
	b := bucketOf(latency)
	w.mu.Lock()
	s := &w.seconds[unix%MaxSeconds]
	if s.unix != unix {
		*s = second{unix: unix}
	}
	s.answers++
	switch {
	case code >= 500:
		s.errors++
	case code == 429:
		s.tooMany++
	}
	if !longRunning {
		s.short++
		s.latencyHis[b]++
	}
	w.mu.Unlock()
}

// Summary is the answers of a stretch of seconds.
type Summary struct {
	Seconds         int
	Answers, Errors int
	TooMany, Short  int
	latency         [numBuckets]uint32
}

// Summarize adds up the answers of the last n seconds up to now, the
// current second included.
func (w *Window) Summarize(now time.Time, n int) Summary {
	n = min(max(n, 1), MaxSeconds)
	sum := Summary{Seconds: n}
	unix := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	for t := unix - int64(n) + 1; t <= unix; t++ {
		s := &w.seconds[t%MaxSeconds]
		if s.unix != t {
			continue
		}
		sum.Answers += int(s.answers)
		sum.Errors += int(s.errors)
		sum.TooMany += int(s.tooMany)
		sum.Short += int(s.short)
		if s.short > 0 {
			for i, c := range s.latencyHis {
				sum.latency[i] += c
			}
		}
	}
	return sum
}

// Percentile is the latency under which share q (0 to 1) of the short
// answers fell, interpolated within its histogram bucket; 0 without any.
func (s *Summary) Percentile(q float64) time.Duration {
	if s.Short == 0 {
		return 0
	}
	rank := math.Ceil(q * float64(s.Short))
	seen := 0.0
	for i, c := range s.latency {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := bucketBounds(i)
			us := lo + (hi-lo)*(rank-seen)/float64(c)
			return time.Duration(us * float64(time.Microsecond))
		}
		seen += float64(c)
	}
	lo, _ := bucketBounds(numBuckets - 1)
	return time.Duration(lo * float64(time.Microsecond))
}
