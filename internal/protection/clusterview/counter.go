package clusterview

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/protection/deletion"
)

// counter keeps, per key, how many cached objects an index function maps
// to it, plus a few of their names, updated by the informer's events. It
// answers in constant time what an Indexer answers by building a list of
// every matching object: 10,000 pods in a namespace cost the same as 10.
//
// client-go's Indexer exposes no size of an index bucket, so this small
// bookkeeping lives here.
type counter struct {
	keys func(obj any) ([]string, error)
	// name renders an object for examples, e.g. "pod/web-1".
	name func(m metav1.Object) string

	mu       sync.RWMutex
	counts   map[string]int
	examples map[string][]string
}

func newCounter(keys func(any) ([]string, error), name func(metav1.Object) string) *counter {
	return &counter{keys: keys, name: name, counts: map[string]int{}, examples: map[string][]string{}}
}

// Sample is the count and examples for key.
func (c *counter) Sample(key string) deletion.Sample {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.counts[key]
	if n == 0 {
		return deletion.Sample{}
	}
	ex := slices.Clone(c.examples[key])
	slices.Sort(ex)
	return deletion.Sample{Count: n, Examples: ex}
}

func (c *counter) apply(obj any, delta int) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	keys, _ := c.keys(obj)
	if len(keys) == 0 {
		return
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	name := c.name(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		c.counts[k] += delta
		ex := c.examples[k]
		switch {
		case c.counts[k] <= 0:
			delete(c.counts, k)
			delete(c.examples, k)
		case delta > 0 && len(ex) < deletion.MaxExamples && !slices.Contains(ex, name):
			c.examples[k] = append(ex, name)
		case delta < 0:
			if i := slices.Index(ex, name); i >= 0 {
				c.examples[k] = slices.Delete(ex, i, i+1)
			}
		}
	}
}

// Handler is the informer event handler that keeps the counts. Informers
// deliver every change in order, after the store holds it, and turn a
// relist into the adds, updates and deletes it implies.
func (c *counter) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.apply(obj, 1) },
		UpdateFunc: func(old, obj any) {
			c.apply(old, -1)
			c.apply(obj, 1)
		},
		DeleteFunc: func(obj any) { c.apply(obj, -1) },
	}
}
