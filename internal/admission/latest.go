package admission

import (
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// latest serializes one replica's status writes to each counted object (a
// DeletionFlowControl, a PodUnavailableBudget), so that conflicts come
// only from other replicas, and remembers each object as this replica last
// wrote it: if nobody wrote since, the next write succeeds without a read
// first; if somebody did, it conflicts and the caller reads the latest.
type latest[T client.Object] struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	written map[string]T
}

// lock is the mutex of one object.
func (l *latest[T]) lock(key string) *sync.Mutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	if l.locks[key] == nil {
		l.locks[key] = &sync.Mutex{}
	}
	return l.locks[key]
}

// get is a copy of the object as last written, if any.
func (l *latest[T]) get(key string) (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.written[key]
	if !ok {
		var zero T
		return zero, false
	}
	return o.DeepCopyObject().(T), true
}

// set records the object as written; forget drops it.
func (l *latest[T]) set(key string, o T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written == nil {
		l.written = map[string]T{}
	}
	l.written[key] = o.DeepCopyObject().(T)
}

func (l *latest[T]) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.written, key)
}
