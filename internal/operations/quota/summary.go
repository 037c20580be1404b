package quota

import corev1 "k8s.io/api/core/v1"

// Pod is what a quota needs of one pod, small enough for the manager to
// keep for every pod it caches (about a tenth of a slimmed pod with its
// containers' resources).
type Pod struct {
	Terminal bool
	// Overhead is the pod overhead: CPU in millicores, memory in bytes.
	Overhead   [2]int64
	Containers []Container
}

// Container is one container's declared requests and limits: index 0 is
// CPU in millicores, 1 memory in bytes; HasRequest/HasLimit say which
// are declared.
type Container struct {
	Request, Limit       [2]int64
	HasRequest, HasLimit [2]bool
	Init                 bool
}

var resourceIndex = [2]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// Summarize is what a quota needs of p.
func Summarize(p *corev1.Pod) Pod {
	out := Pod{Terminal: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed}
	for i, name := range resourceIndex {
		if q, ok := p.Spec.Overhead[name]; ok {
			out.Overhead[i] = value(i, q.MilliValue(), q.Value())
		}
	}
	add := func(cs []corev1.Container, init bool) {
		for _, c := range cs {
			s := Container{Init: init}
			for i, name := range resourceIndex {
				if q, ok := c.Resources.Requests[name]; ok {
					s.Request[i], s.HasRequest[i] = value(i, q.MilliValue(), q.Value()), true
				}
				if q, ok := c.Resources.Limits[name]; ok {
					s.Limit[i], s.HasLimit[i] = value(i, q.MilliValue(), q.Value()), true
				}
			}
			out.Containers = append(out.Containers, s)
		}
	}
	add(p.Spec.InitContainers, true)
	add(p.Spec.Containers, false)
	return out
}

func value(i int, milli, whole int64) int64 {
	if i == 0 {
		return milli
	}
	return whole
}

// SummarizeAll summarizes every pod of ps.
func SummarizeAll(ps []*corev1.Pod) []Pod {
	out := make([]Pod, len(ps))
	for i, p := range ps {
		out[i] = Summarize(p)
	}
	return out
}
