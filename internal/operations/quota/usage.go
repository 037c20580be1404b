package quota

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults are the container requests and limits a LimitRange gives
// containers that declare none. Once a quota caps requests and limits, the
// API server refuses pods without them; these defaults let such pods in.
type Defaults struct {
	Request, Limit corev1.ResourceList
}

// Fallback defaults, for a namespace whose containers declare nothing.
var (
	fallbackRequest = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	fallbackLimit   = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
)

// LimitDefaults are the defaults for a namespace's containers: the mean
// request and the mean limit of the (non-init) containers that declare
// them (rounded up to the quota's step, limit never below request), or
// the fallbacks.
func LimitDefaults(pods []Pod) Defaults {
	d := Defaults{Request: corev1.ResourceList{}, Limit: corev1.ResourceList{}}
	for i, r := range resourceIndex {
		req, ok := mean(pods, i, func(c Container) (int64, bool) { return c.Request[i], c.HasRequest[i] })
		if !ok {
			req = fallbackRequest[r]
		}
		d.Request[r] = defaultSize(i, req)
		lim, ok := mean(pods, i, func(c Container) (int64, bool) { return c.Limit[i], c.HasLimit[i] })
		if !ok {
			lim = fallbackLimit[r]
		}
		lim = defaultSize(i, lim)
		if lim.Cmp(d.Request[r]) < 0 {
			lim = d.Request[r].DeepCopy()
		}
		d.Limit[r] = lim
	}
	return d
}

// defaultSize rounds a default up to the quota's step, with no floor
// above one step: a floor above the declared mean would make a pod without
// requests cost more than its peers and hit the quota first.
func defaultSize(i int, q resource.Quantity) resource.Quantity {
	if i == 0 {
		return roundUp(q.MilliValue(), cpuStep.MilliValue(), cpuStep.MilliValue(), resource.DecimalSI, true)
	}
	return roundUp(q.Value(), memStep.Value(), memStep.Value(), resource.BinarySI, false)
}

// mean is the mean of resource i over the containers that declare it.
func mean(pods []Pod, i int, of func(Container) (int64, bool)) (resource.Quantity, bool) {
	var sum, n int64
	for _, p := range pods {
		for _, c := range p.Containers {
			if v, ok := of(c); ok && !c.Init {
				sum += v
				n++
			}
		}
	}
	if n == 0 {
		return resource.Quantity{}, false
	}
	if i == 0 {
		return *resource.NewMilliQuantity((sum+n-1)/n, resource.DecimalSI), true
	}
	return *resource.NewQuantity((sum+n-1)/n, resource.BinarySI), true
}

// PodUse is what pods use as a quota counts it: non-terminal pods and
// their requests and limits, a container without a value counted with
// the defaults a LimitRange would give it (a container with only a limit
// gets it as its request, as the API server does). A pod's value is the
// sum over its containers or its largest init container, whichever is
// larger, plus its overhead.
func PodUse(pods []Pod, d Defaults) corev1.ResourceList {
	var n int64
	var req, lim [2]int64
	for _, p := range pods {
		if p.Terminal {
			continue
		}
		n++
		r, l := podValues(p, d)
		for i := range 2 {
			req[i] += r[i]
			lim[i] += l[i]
		}
	}
	return corev1.ResourceList{
		Pods:           *resource.NewQuantity(n, resource.DecimalSI),
		RequestsCPU:    *resource.NewMilliQuantity(req[0], resource.DecimalSI),
		RequestsMemory: *resource.NewQuantity(req[1], resource.BinarySI),
		LimitsCPU:      *resource.NewMilliQuantity(lim[0], resource.DecimalSI),
		LimitsMemory:   *resource.NewQuantity(lim[1], resource.BinarySI),
	}
}

// podValues are a pod's requests and limits (CPU in millicores, memory in
// bytes) after a LimitRange with defaults d.
func podValues(p Pod, d Defaults) (req, lim [2]int64) {
	var sumR, sumL, initR, initL [2]int64
	for _, c := range p.Containers {
		r, l := containerValues(c, d)
		for i := range 2 {
			if c.Init {
				initR[i], initL[i] = max(initR[i], r[i]), max(initL[i], l[i])
			} else {
				sumR[i], sumL[i] = sumR[i]+r[i], sumL[i]+l[i]
			}
		}
	}
	for i := range 2 {
		req[i] = max(sumR[i], initR[i]) + p.Overhead[i]
		lim[i] = max(sumL[i], initL[i]) + p.Overhead[i]
	}
	return req, lim
}

// containerValues are a container's requests and limits after a LimitRange
// with defaults d: a missing limit gets the default limit, a missing
// request the limit (if declared) or the default request.
func containerValues(c Container, d Defaults) (req, lim [2]int64) {
	for i, name := range resourceIndex {
		dr, dl := d.Request[name], d.Limit[name]
		defReq, defLim := value(i, dr.MilliValue(), dr.Value()), value(i, dl.MilliValue(), dl.Value())
		switch {
		case c.HasRequest[i]:
			req[i] = c.Request[i]
		case c.HasLimit[i]:
			req[i] = c.Limit[i]
		default:
			req[i] = defReq
		}
		lim[i] = c.Limit[i]
		if !c.HasLimit[i] {
			lim[i] = max(defLim, req[i])
		}
	}
	return req, lim
}
