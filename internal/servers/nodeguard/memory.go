package nodeguard

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// memory is what the guard remembers of each pod's recent pod-ending
// calls: the evidence that tells a kill of the pod from a restart of one
// container (View.Concurrent, KillSeen, RestartPassed).
type memory struct {
	// window is how long a kill attempt or a probe restart is remembered.
	window time.Duration

	mu   sync.Mutex
	pods map[types.UID]*podMemory
}

type podMemory struct {
	// stopping are the StopContainer calls of this pod in the guard now,
	// by container ID (judged, held, or forwarded and not yet answered).
	stopping map[string]*stopCall
	killSeen time.Time
	// restarted: container name -> when a probe restart was let through,
	// until the kubelet creates the container again.
	restarted map[string]time.Time
	touched   time.Time
}

// stopCall is one StopContainer in flight.
type stopCall struct {
	// concurrent is set (under memory.mu) when another container of the
	// same pod was being stopped at the same time.
	concurrent bool
}

func newMemory(window time.Duration) *memory {
	return &memory{window: window, pods: map[types.UID]*podMemory{}}
}

func (m *memory) pod(uid types.UID, now time.Time) *podMemory {
	p := m.pods[uid]
	if p == nil {
		m.sweep(now)
		p = &podMemory{stopping: map[string]*stopCall{}, restarted: map[string]time.Time{}}
		m.pods[uid] = p
	}
	p.touched = now
	return p
}

// sweep forgets pods with nothing in flight and nothing recent.
func (m *memory) sweep(now time.Time) {
	for uid, p := range m.pods {
		if len(p.stopping) == 0 && now.Sub(p.touched) > m.window {
			delete(m.pods, uid)
		}
	}
}

// beginStop records a StopContainer of containerID of uid; end must be
// called when it is answered.
func (m *memory) beginStop(uid types.UID, containerID string, now time.Time) (call *stopCall, end func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pod(uid, now)
	call = &stopCall{}
	for id, other := range p.stopping {
		if id != containerID {
			other.concurrent, call.concurrent = true, true
		}
	}
	if _, dup := p.stopping[containerID]; !dup {
		p.stopping[containerID] = call
	}
	return call, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if p.stopping[containerID] == call {
			delete(p.stopping, containerID)
		}
	}
}

func (m *memory) concurrent(c *stopCall) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return c.concurrent
}

func (m *memory) sawKill(uid types.UID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pod(uid, now).killSeen = now
}

func (m *memory) killSeen(uid types.UID, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[uid]
	return p != nil && !p.killSeen.IsZero() && now.Sub(p.killSeen) <= m.window
}

func (m *memory) passedRestart(uid types.UID, container string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pod(uid, now).restarted[container] = now
}

func (m *memory) restartPassed(uid types.UID, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[uid]
	if p == nil {
		return false
	}
	for _, at := range p.restarted {
		if now.Sub(at) <= m.window {
			return true
		}
	}
	return false
}

// created: the kubelet created container name of uid again, so a restart
// let through for it is complete.
func (m *memory) created(uid types.UID, container string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pods[uid]; p != nil {
		delete(p.restarted, container)
	}
}
