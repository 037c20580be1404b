package trafficprofile

import (
	"container/heap"
	"math"
	"time"
)

// Seats is what API Priority and Fairness charges a request while the API
// server serves it, as kube-apiserver's work estimator does by default: a
// LIST one seat per 100 objects, from 1 to 10; any other request one. The
// estimator counts the objects the API server holds for the LIST's scope;
// here the objects the LIST returned stand for them (fewer under a
// selector), and a LIST the log does not count is one seat.
func Seats(e *Entry) int64 {
	if e.Verb != "list" || e.Objects <= 100 {
		return 1
	}
	return min(int64(math.Ceil(float64(e.Objects)/100)), 10)
}

// flights measures each client's peak concurrency. Requests are taken in
// order of receipt, held back reorderWindow as the replay holds them
// (an audit log is in order of answers), each in flight from its receipt
// for its latency.
type flights struct {
	pending flightHeap
	latest  time.Time
}

type flight struct {
	c          *client
	start, end time.Time
	list       bool
	seats      int64 // seats × the entry's weight
	n          int64 // the entry's weight
}

// inFlight is one client's requests being served at the moment the
// flights have reached.
type inFlight struct {
	ends                             endHeap
	requests, lists, seat, listSeats int64
}

func (f *flights) add(c *client, e *Entry) {
	if e.LongRunning() {
		return // APF frees a watch's seat once it is set up
	}
	x := flight{c: c, start: e.Time, end: e.Time.Add(max(e.Latency, 0)), list: e.Verb == "list", seats: Seats(e) * e.Weight, n: e.Weight}
	heap.Push(&f.pending, x)
	if e.Time.After(f.latest) {
		f.latest = e.Time
	}
	for len(f.pending) > 0 && f.latest.Sub(f.pending[0].start) > reorderWindow {
		f.take(heap.Pop(&f.pending).(flight))
	}
}

func (f *flights) flush() {
	for len(f.pending) > 0 {
		f.take(heap.Pop(&f.pending).(flight))
	}
}

func (f *flights) take(x flight) {
	in := &x.c.inFlight
	for len(in.ends) > 0 && !in.ends[0].end.After(x.start) {
		done := heap.Pop(&in.ends).(flight)
		in.requests -= done.n
		in.seat -= done.seats
		if done.list {
			in.lists -= done.n
			in.listSeats -= done.seats
		}
	}
	heap.Push(&in.ends, x)
	in.requests += x.n
	in.seat += x.seats
	if x.list {
		in.lists += x.n
		in.listSeats += x.seats
	}
	cp := &x.c.p
	cp.PeakInFlight = max(cp.PeakInFlight, in.requests)
	cp.PeakListsInFlight = max(cp.PeakListsInFlight, in.lists)
	cp.PeakSeats = max(cp.PeakSeats, in.seat)
	cp.PeakListSeats = max(cp.PeakListSeats, in.listSeats)
}

// flightHeap orders flights by start.
type flightHeap []flight

func (h flightHeap) Len() int           { return len(h) }
func (h flightHeap) Less(i, j int) bool { return h[i].start.Before(h[j].start) }
func (h flightHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)        { *h = append(*h, x.(flight)) }
func (h *flightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// endHeap orders flights by end.
type endHeap []flight

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(flight)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
