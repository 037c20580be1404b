package apf

import (
	"cmp"
	"container/heap"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"

	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

// WaitLimit is how long APF lets a request wait in a queue: a quarter of
// its 60 s deadline (kube-apiserver's --request-timeout).
const WaitLimit = 15 * time.Second

// reorderWindow is how long the replay holds entries back to take them in
// order of receipt (an audit log is in order of answers).
const reorderWindow = 30 * time.Second

// Replay runs a log through a configuration as one API server's APF would
// have, at the concurrency the log shows. What it models: each request
// (watches and other long-running ones aside, as APF sets them aside once
// started) is classified by the FlowSchemas; it holds Seats for the
// latency the log shows, on its level's nominal seats (NominalSeats; no
// borrowing between levels); when they are taken, a Reject level rejects
// it and a Queue level queues it on the shortest of handSize queues dealt
// from its flow, rejects it if that queue is full, and rejects it after
// WaitLimit in the queue. Freed seats go to the queues in turn (round
// robin, not APF's virtual-time fair queuing). A request's latency is the
// logged one whatever the wait. The log shows one API server's traffic:
// replay each server's log on its own.
type Replay struct {
	cfg      *Config
	seats    map[string]int
	levels   map[string]*levelState
	pending  entryHeap
	latest   time.Time
	clients  map[clientKey]*ClientOutcome
	schemas  map[string]*SchemaOutcome
	requests int64
}

type clientKey struct{ user, agent, proxy, schema string }

// ClientOutcome is what APF would have done to one client's requests on
// one flow schema.
type ClientOutcome struct {
	User          string `json:"user"`
	UserAgent     string `json:"userAgent"`
	Proxy         string `json:"proxy,omitempty"`
	FlowSchema    string `json:"flowSchema"`
	PriorityLevel string `json:"priorityLevel"`
	Requests      int64  `json:"requests"`
	Queued        int64  `json:"queued"`
	Rejected      int64  `json:"rejected"`
	// MaxWait is the longest a request of it waited in a queue.
	MaxWait time.Duration `json:"maxWaitNanos"`
}

// SchemaOutcome counts one flow schema's requests.
type SchemaOutcome struct {
	FlowSchema    string `json:"flowSchema"`
	PriorityLevel string `json:"priorityLevel"`
	Matched       int64  `json:"matched"`
}

// LevelOutcome is what one priority level did.
type LevelOutcome struct {
	PriorityLevel string `json:"priorityLevel"`
	Exempt        bool   `json:"exempt,omitempty"`
	Seats         int    `json:"seats"`
	Dispatched    int64  `json:"dispatched"`
	Queued        int64  `json:"queued"`
	// RejectedQueueFull, RejectedTimeout and RejectedConcurrency are its
	// 429s: its chosen queue full, WaitLimit passed in a queue, no seat on
	// a level that does not queue.
	RejectedQueueFull   int64         `json:"rejectedQueueFull"`
	RejectedTimeout     int64         `json:"rejectedTimeout"`
	RejectedConcurrency int64         `json:"rejectedConcurrency"`
	PeakSeatsInUse      int           `json:"peakSeatsInUse"`
	MaxWait             time.Duration `json:"maxWaitNanos"`
}

// ReplayResult is the replay's answer.
type ReplayResult struct {
	Model    string          `json:"model"`
	Requests int64           `json:"requests"`
	Schemas  []SchemaOutcome `json:"flowSchemas"`
	Levels   []LevelOutcome  `json:"priorityLevels"`
	// Clients: rejected first, then queued, then by requests.
	Clients []ClientOutcome `json:"clients"`
}

// Model says in a line what the replay models.
const Model = "one API server's APF at the logged concurrency: nominal seats per level (no borrowing), seats per request as kube-apiserver estimates LISTs (objects returned stand for objects stored), logged latencies, shuffle-sharded queues served round robin, 15 s wait limit"

type waiting struct {
	at    time.Time
	seats int
	dur   time.Duration
	c     *ClientOutcome
}

type levelState struct {
	out     LevelOutcome
	spec    *flowcontrolv1.PriorityLevelConfiguration
	inUse   int
	running endHeap
	queues  [][]waiting
	next    int // the queue served next
}

// NewReplay replays against cfg on an API server of serverSeats.
func NewReplay(cfg *Config, serverSeats int) *Replay {
	rp := &Replay{cfg: cfg, seats: cfg.NominalSeats(serverSeats), levels: map[string]*levelState{},
		clients: map[clientKey]*ClientOutcome{}, schemas: map[string]*SchemaOutcome{}}
	for name, l := range cfg.Levels {
		ls := &levelState{spec: l, out: LevelOutcome{PriorityLevel: name, Exempt: l.Spec.Type == flowcontrolv1.PriorityLevelEnablementExempt, Seats: rp.seats[name]}}
		if q := queuing(l); q != nil {
			ls.queues = make([][]waiting, max(q.Queues, 1))
		}
		rp.levels[name] = ls
	}
	return rp
}

func queuing(l *flowcontrolv1.PriorityLevelConfiguration) *flowcontrolv1.QueuingConfiguration {
	if l.Spec.Limited == nil || l.Spec.Limited.LimitResponse.Type != flowcontrolv1.LimitResponseTypeQueue {
		return nil
	}
	return l.Spec.Limited.LimitResponse.Queuing
}

// Add replays one entry (after earlier ones within the reorder window).
func (rp *Replay) Add(e *trafficprofile.Entry) {
	if e.Time.IsZero() {
		return
	}
	heap.Push(&rp.pending, *e)
	if e.Time.After(rp.latest) {
		rp.latest = e.Time
	}
	for len(rp.pending) > 0 && rp.latest.Sub(rp.pending[0].Time) > reorderWindow {
		x := heap.Pop(&rp.pending).(trafficprofile.Entry)
		rp.judge(&x)
	}
}

func (rp *Replay) judge(e *trafficprofile.Entry) {
	rp.advance(e.Time)
	r := RequestOf(e)
	s, l := rp.cfg.Classify(r)
	if s == nil {
		return // no catch-all: cannot happen with the built-in objects
	}
	rp.requests += e.Weight
	so := rp.schemas[s.Name]
	if so == nil {
		so = &SchemaOutcome{FlowSchema: s.Name, PriorityLevel: l.Name}
		rp.schemas[s.Name] = so
	}
	so.Matched += e.Weight
	k := clientKey{e.User, e.UserAgent, e.Proxy, s.Name}
	c := rp.clients[k]
	if c == nil {
		c = &ClientOutcome{User: e.User, UserAgent: e.UserAgent, Proxy: e.Proxy, FlowSchema: s.Name, PriorityLevel: l.Name}
		rp.clients[k] = c
	}
	c.Requests += e.Weight
	ls := rp.levels[l.Name]
	if ls.out.Exempt || e.LongRunning() {
		ls.out.Dispatched += e.Weight
		return
	}
	seats := int(min(trafficprofile.Seats(e), int64(max(ls.out.Seats, 1))))
	for range e.Weight {
		rp.arrive(ls, waiting{at: e.Time, seats: seats, dur: max(e.Latency, 0), c: c}, Flow(s, r))
	}
}

func (rp *Replay) arrive(ls *levelState, w waiting, flow string) {
	if ls.inUse+w.seats <= ls.out.Seats && ls.queued() == 0 {
		ls.dispatch(w, w.at)
		return
	}
	q := queuing(ls.spec)
	if q == nil {
		ls.out.RejectedConcurrency++
		w.c.Rejected++
		return
	}
	// Shuffle sharding: the flow's hand of queues, the shortest taken.
	h := fnv.New64a()
	h.Write([]byte(flow))
	sum, best := h.Sum64(), -1
	for range min(q.HandSize, q.Queues) {
		i := int(sum % uint64(len(ls.queues)))
		sum /= uint64(len(ls.queues))
		if best < 0 || len(ls.queues[i]) < len(ls.queues[best]) {
			best = i
		}
	}
	if len(ls.queues[best]) >= int(q.QueueLengthLimit) {
		ls.out.RejectedQueueFull++
		w.c.Rejected++
		return
	}
	ls.queues[best] = append(ls.queues[best], w)
	ls.out.Queued++
	w.c.Queued++
}

func (ls *levelState) queued() int {
	n := 0
	for _, q := range ls.queues {
		n += len(q)
	}
	return n
}

func (ls *levelState) dispatch(w waiting, now time.Time) {
	ls.inUse += w.seats
	ls.out.PeakSeatsInUse = max(ls.out.PeakSeatsInUse, ls.inUse)
	ls.out.Dispatched++
	if wait := now.Sub(w.at); wait > 0 {
		ls.out.MaxWait = max(ls.out.MaxWait, wait)
		w.c.MaxWait = max(w.c.MaxWait, wait)
	}
	heap.Push(&ls.running, running{end: now.Add(w.dur), seats: w.seats})
}

// advance runs every level up to now: requests end, queued ones time out
// or take the freed seats.
func (rp *Replay) advance(now time.Time) {
	for _, ls := range rp.levels {
		for {
			// The next event: a request ending, or none before now.
			at := now
			if len(ls.running) > 0 && ls.running[0].end.Before(now) {
				at = ls.running[0].end
			}
			ls.expire(at)
			for len(ls.running) > 0 && !ls.running[0].end.After(at) {
				ls.inUse -= heap.Pop(&ls.running).(running).seats
			}
			ls.serve(at)
			if !at.Before(now) {
				break
			}
		}
	}
}

func (ls *levelState) expire(now time.Time) {
	for i, q := range ls.queues {
		kept := q[:0]
		for _, w := range q {
			if now.Sub(w.at) >= WaitLimit {
				ls.out.RejectedTimeout++
				w.c.Rejected++
				continue
			}
			kept = append(kept, w)
		}
		ls.queues[i] = kept
	}
}

func (ls *levelState) serve(now time.Time) {
	for tried := 0; tried < len(ls.queues); {
		i := ls.next % len(ls.queues)
		ls.next++
		q := ls.queues[i]
		if len(q) == 0 || ls.inUse+q[0].seats > ls.out.Seats {
			tried++
			continue
		}
		tried = 0
		ls.dispatch(q[0], now)
		ls.queues[i] = q[1:]
	}
}

// Result flushes the held entries, lets every queue drain, and returns
// the outcome.
func (rp *Replay) Result() ReplayResult {
	for len(rp.pending) > 0 {
		x := heap.Pop(&rp.pending).(trafficprofile.Entry)
		rp.judge(&x)
	}
	rp.advance(rp.latest.Add(WaitLimit + time.Hour))
	res := ReplayResult{Model: Model, Requests: rp.requests}
	for _, s := range rp.schemas {
		res.Schemas = append(res.Schemas, *s)
	}
	for _, l := range rp.levels {
		if l.out.Dispatched+l.out.Queued+l.out.RejectedConcurrency+l.out.RejectedQueueFull > 0 {
			res.Levels = append(res.Levels, l.out)
		}
	}
	for _, c := range rp.clients {
		res.Clients = append(res.Clients, *c)
	}
	slices.SortFunc(res.Schemas, func(a, b SchemaOutcome) int {
		return cmp.Or(cmp.Compare(b.Matched, a.Matched), cmp.Compare(a.FlowSchema, b.FlowSchema))
	})
	slices.SortFunc(res.Levels, func(a, b LevelOutcome) int { return cmp.Compare(a.PriorityLevel, b.PriorityLevel) })
	slices.SortFunc(res.Clients, func(a, b ClientOutcome) int {
		return cmp.Or(cmp.Compare(b.Rejected, a.Rejected), cmp.Compare(b.Queued, a.Queued), cmp.Compare(b.Requests, a.Requests),
			cmp.Compare(a.User, b.User), cmp.Compare(a.UserAgent, b.UserAgent), cmp.Compare(a.FlowSchema, b.FlowSchema))
	})
	return res
}

// WriteReplay writes the outcome as text.
func WriteReplay(w io.Writer, r ReplayResult) {
	fmt.Fprintf(w, "%d requests replayed through API Priority and Fairness\nmodel: %s\n\nFLOW SCHEMA -> PRIORITY LEVEL: REQUESTS\n", r.Requests, r.Model)
	for _, s := range r.Schemas {
		fmt.Fprintf(w, "  %s -> %s: %d\n", s.FlowSchema, s.PriorityLevel, s.Matched)
	}
	fmt.Fprintln(w, "\nPRIORITY LEVEL: SEATS, PEAK IN USE, DISPATCHED, QUEUED, REJECTED (queue full / wait limit / no seat), LONGEST WAIT")
	for _, l := range r.Levels {
		if l.Exempt {
			fmt.Fprintf(w, "  %s: exempt, %d dispatched\n", l.PriorityLevel, l.Dispatched)
			continue
		}
		fmt.Fprintf(w, "  %s: %d seats, peak %d, %d dispatched, %d queued, %d rejected (%d / %d / %d), longest wait %s\n", l.PriorityLevel, l.Seats, l.PeakSeatsInUse,
			l.Dispatched, l.Queued, l.RejectedQueueFull+l.RejectedTimeout+l.RejectedConcurrency, l.RejectedQueueFull, l.RejectedTimeout, l.RejectedConcurrency, l.MaxWait.Round(time.Millisecond))
	}
	fmt.Fprintln(w, "\nCLIENT -> FLOW SCHEMA (LEVEL): REQUESTS, QUEUED, REJECTED, LONGEST WAIT")
	for _, c := range r.Clients {
		name := fmt.Sprintf("%s (%s)", c.User, c.UserAgent)
		if c.Proxy != "" {
			name += " via " + c.Proxy
		}
		fmt.Fprintf(w, "  %s -> %s (%s): %d, %d queued, %d rejected, longest wait %s\n", name, c.FlowSchema, c.PriorityLevel, c.Requests, c.Queued, c.Rejected, c.MaxWait.Round(time.Millisecond))
	}
}

type running struct {
	end   time.Time
	seats int
}

type endHeap []running

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(running)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type entryHeap []trafficprofile.Entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].Time.Before(h[j].Time) }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(trafficprofile.Entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
