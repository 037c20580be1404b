package clusterview

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/operations/quota"
)

// podSummaries keep each cached pod's requests and limits as a quota
// counts them (quota.Pod), read before slim drops the spec: a compact
// summary instead of the containers, so the pod cache stays small.
type podSummaries struct {
	mu sync.Mutex
	// byKey is by UID: a pod deleted and made again under its name is
	// another entry, whatever order their events come in.
	byKey map[string]podSummary
}

type podSummary struct {
	namespace string
	pod       quota.Pod
}

func newPodSummaries() *podSummaries { return &podSummaries{byKey: map[string]podSummary{}} }

// transform records a pod's summary, then slims it with next.
func (s *podSummaries) transform(next cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			sum := quota.Summarize(p)
			s.mu.Lock()
			s.byKey[string(p.UID)] = podSummary{namespace: p.Namespace, pod: sum}
			s.mu.Unlock()
		}
		return next(obj)
	}
}

// handler forgets deleted pods.
func (s *podSummaries) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			s.mu.Lock()
			delete(s.byKey, string(p.UID))
			s.mu.Unlock()
		}
	}}
}

// PodsByNamespace are the summaries of the cached pods, by namespace.
func (c *Informers) PodsByNamespace() map[string][]quota.Pod {
	c.podUse.mu.Lock()
	defer c.podUse.mu.Unlock()
	out := map[string][]quota.Pod{}
	for _, s := range c.podUse.byKey {
		out[s.namespace] = append(out[s.namespace], s.pod)
	}
	return out
}
