package recyclebin

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultNamespaceContentsMax is what the bin keeps, by default, of the
// contents of one protected namespace the namespace controller empties:
// room for every ConfigMap and Secret of an ordinary namespace (a Helm
// release's history included), not for a namespace used as a data store,
// whose size would fill the bin's store in one delete.
const DefaultNamespaceContentsMax int64 = 64 << 20

// Why an object of a protected namespace being deleted goes without a
// copy (the reason label of rampart_recyclebin_namespace_contents_not_kept_total).
const (
	// NotKeptCap: the namespace's contents reached the cap.
	NotKeptCap = "cap"
	// NotKeptStore: the store failed or was slow; the namespace
	// controller is never held up for it.
	NotKeptStore = "store"
)

// contentsGiveUpAfter failed captures in one namespace, its remaining
// contents go without a copy: a store that fails or is slow must not
// slow down the namespace controller object by object.
const contentsGiveUpAfter = 3

// contentsForget is how long after its last delete a namespace's tally is
// forgotten: a namespace of the same name made and deleted again later
// starts afresh.
const contentsForget = 30 * time.Minute

// NamespaceContents counts what the bin kept of each protected namespace
// the namespace controller empties, against Max bytes per namespace. Each
// manager replica counts the deletes it is sent, so with several replicas
// a namespace may take up to Max per replica.
type NamespaceContents struct {
	// Max is the cap per namespace; 0 keeps no contents.
	Max int64

	mu   sync.Mutex
	byNS map[string]*contentsTally
}

type contentsTally struct {
	kept     int64
	uids     map[types.UID]int64
	failures int
	// reported: an object of the namespace already went without a copy.
	reported bool
	last     time.Time
}

// Take decides whether the bin keeps an object of size bytes (the object
// with uid) from namespace ns: reason is "" to keep it (its bytes are
// counted), else why not; first says it is the first object of the
// namespace not kept, the one to report.
func (c *NamespaceContents) Take(ns string, uid types.UID, size int64, now time.Time) (reason string, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tally(ns, now)
	if _, ok := t.uids[uid]; ok {
		return "", false // the API server asked again: already counted
	}
	switch {
	case t.failures >= contentsGiveUpAfter:
		reason = NotKeptStore
	case t.kept+size > c.Max:
		reason = NotKeptCap
	default:
		t.kept += size
		t.uids[uid] = size
		return "", false
	}
	contentsNotKept.WithLabelValues(reason).Inc()
	first, t.reported = !t.reported, true
	return reason, first
}

// Failed gives back what Take counted for an object whose copy could not
// be stored, and counts the failure.
func (c *NamespaceContents) Failed(ns string, uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tally(ns, now)
	t.kept -= t.uids[uid]
	delete(t.uids, uid)
	t.failures++
}

// tally is ns's, made on first use; tallies idle past contentsForget are
// dropped. c.mu is held.
func (c *NamespaceContents) tally(ns string, now time.Time) *contentsTally {
	if c.byNS == nil {
		c.byNS = map[string]*contentsTally{}
	}
	for name, t := range c.byNS {
		if now.Sub(t.last) > contentsForget {
			delete(c.byNS, name)
		}
	}
	t, ok := c.byNS[ns]
	if !ok {
		t = &contentsTally{uids: map[types.UID]int64{}}
		c.byNS[ns] = t
	}
	t.last = now
	return t
}
