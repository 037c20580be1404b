package nodeguard

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodSource is the API's view of this node's pods.
type PodSource interface {
	// Pod is the pod with this UID, nil if the API has none (as last
	// seen).
	Pod(uid types.UID) *corev1.Pod
	// Reachable says whether what Pod answers is current enough to act
	// on; why says what is wrong when it is not.
	Reachable(now time.Time) (ok bool, why string)
	// Vanished is the last state seen of a pod the API no longer has,
	// nil if the pod did not vanish while the source watched.
	Vanished(uid types.UID) *corev1.Pod
}

// VanishedMemory is how long the guard keeps the last state of a pod that
// left the API. The kubelet kills a pod it no longer finds in the API
// within seconds and retries every sync while refused; an hour covers a
// runtime that is slow to answer, and costs a few hundred bytes a pod.
const VanishedMemory = time.Hour

// DefaultStaleAfter is how long the pod watch may fail before the API
// counts as unreachable. The reflector re-lists and re-watches within a
// second or two after an ordinary break (an API server restart, an expired
// resource version); 10 s absorbs that. Past it the cache may lack pods
// created since and label or deletion changes, so the guard stops acting
// on it. A connection that dies silently shows no error until client-go's
// HTTP/2 health check closes it (about 45 s); that delay adds to this one.
const DefaultStaleAfter = 10 * time.Second

// FreshPods is a PodSource that can also read one pod from the API now,
// past its cache.
type FreshPods interface {
	Fresh(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// freshWithin bounds the live read a refusal waits for.
const freshWithin = 2 * time.Second

// NodePods is an informer of the pods bound to one node
// (fieldSelector spec.nodeName=NODE), indexed by UID, that tracks whether
// its list and watch still reach the API server.
type NodePods struct {
	client     kubernetes.Interface
	informer   cache.SharedIndexInformer
	staleAfter time.Duration

	mu sync.Mutex
	// failingSince is the first failure since the last success; zero
	// while list and watch work.
	failingSince time.Time
	lastErr      error
	// gone are the pods that vanished from the API, by UID.
	gone map[types.UID]vanishedPod
}

// vanishedPod is what the guard keeps of a pod that left the API: its
// metadata as last seen, and when it saw it go.
type vanishedPod struct {
	last *corev1.Pod
	at   time.Time
}

const byUID = "uid"

// NewNodePods builds the informer; Run starts it.
func NewNodePods(client kubernetes.Interface, node string, staleAfter time.Duration) *NodePods {
	n := &NodePods{client: client, staleAfter: staleAfter, gone: map[types.UID]vanishedPod{}}
	onNode := fields.OneTermEqualSelector("spec.nodeName", node).String()
	pods := func() podsClient { return client.CoreV1().Pods("") }
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = onNode
			l, err := pods().List(ctx, o)
			n.record(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = onNode
			w, err := pods().Watch(ctx, o)
			n.record(err)
			if err != nil {
				return w, err
			}
			// A deleted pod is noted before the informer's store drops it,
			// so that no lookup finds it neither in the API nor gone, and
			// so that the guard knows it gone as soon as its watch says so:
			// the kubelet, which watches the same API server, asks to kill
			// such a pod within milliseconds (seen in the orphaned-pods
			// drill, before the store had dropped it). A pod back in the
			// API is forgotten as gone the same way.
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				switch e.Type {
				case watch.Deleted:
					n.vanish(e.Object)
				case watch.Added:
					n.returned(e.Object)
				}
				return e, true
			}), nil
		},
	}
	n.informer = cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{},
		cache.SharedIndexInformerOptions{Indexers: cache.Indexers{byUID: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		}}})
	// The guard reads labels, the deletion timestamp, spec and status;
	// managed fields are most of a pod's bytes and never read.
	_ = n.informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	})
	// A pod deleted while the watch was broken is dropped by the next
	// list, with the last state the store had.
	_, _ = n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: n.vanish, AddFunc: n.returned})
	_ = n.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		n.record(err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	return n
}

type podsClient interface {
	List(context.Context, metav1.ListOptions) (*corev1.PodList, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// record notes a list or watch outcome.
func (n *NodePods) record(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		n.failingSince, n.lastErr = time.Time{}, nil
		return
	}
	if n.failingSince.IsZero() {
		n.failingSince = time.Now()
	}
	n.lastErr = err
}

// Run runs the informer until ctx ends.
func (n *NodePods) Run(ctx context.Context) { n.informer.RunWithContext(ctx) }

// Synced says whether the first list has arrived.
func (n *NodePods) Synced() bool { return n.informer.HasSynced() }

func (n *NodePods) Pod(uid types.UID) *corev1.Pod {
	objs, err := n.informer.GetIndexer().ByIndex(byUID, string(uid))
	if err != nil || len(objs) == 0 {
		return nil
	}
	p, _ := objs[0].(*corev1.Pod)
	return p
}

func (n *NodePods) Reachable(now time.Time) (bool, string) {
	if !n.informer.HasSynced() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.lastErr != nil {
			return false, fmt.Sprintf("this node's pods were never listed: %v", n.lastErr)
		}
		return false, "this node's pods have not been listed yet"
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.failingSince.IsZero() && now.Sub(n.failingSince) >= n.staleAfter {
		return false, fmt.Sprintf("the watch of this node's pods has failed for %s: %v", now.Sub(n.failingSince).Round(time.Second), n.lastErr)
	}
	return true, ""
}

// vanish notes the last state of a pod that left the API. The first note
// wins: the watch's DELETE event comes before the informer's handler sees
// the same pod go.
func (n *NodePods) vanish(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	// Only the metadata is read: labels, the record and deletionTimestamp.
	last := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		Labels: p.Labels, Annotations: p.Annotations, DeletionTimestamp: p.DeletionTimestamp}}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, seen := n.gone[p.UID]; seen {
		return
	}
	for uid, g := range n.gone {
		if now.Sub(g.at) > VanishedMemory {
			delete(n.gone, uid)
		}
	}
	n.gone[p.UID] = vanishedPod{last: last, at: now}
}

// returned forgets that a pod vanished once it is in the API again with
// the same UID (an etcd restore puts it back).
func (n *NodePods) returned(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		n.mu.Lock()
		delete(n.gone, p.UID)
		n.mu.Unlock()
	}
}

// Vanished is the last state seen of a pod the API no longer has. It may
// be noted while the informer's store still holds the pod (the watch's
// DELETE event is noted first); a pod back in the API with the same UID
// (an etcd restore) is forgotten as gone by its ADD event, or by the
// store's add after a re-list.
func (n *NodePods) Vanished(uid types.UID) *corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gone[uid].last
}

// Fresh reads the pod from the API server, not the cache.
func (n *NodePods) Fresh(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, freshWithin)
	defer cancel()
	return n.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}
