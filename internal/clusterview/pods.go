package clusterview

import corev1 "k8s.io/api/core/v1"

// resourcesOnly keeps of each container only its requests and limits, what
// the quota peaks read (internal/quota.PodUse): a few dozen bytes a pod.
func resourcesOnly(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests, Limits: c.Resources.Limits}}
	}
	return out
}

// PodsByNamespace are the cached pods grouped by namespace, slimmed (see
// slim). The pods are the cache's: read them, never change them.
func (c *Informers) PodsByNamespace() map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, o := range c.informer(pods).GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok {
			out[p.Namespace] = append(out[p.Namespace], p)
		}
	}
	return out
}
