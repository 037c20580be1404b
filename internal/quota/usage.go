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
// request and the mean limit of the containers that declare them (rounded
// like quota sizes, limit never below request), or the fallbacks.
func LimitDefaults(pods []*corev1.Pod) Defaults {
	d := Defaults{Request: corev1.ResourceList{}, Limit: corev1.ResourceList{}}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		quotaName := RequestsCPU
		if r == corev1.ResourceMemory {
			quotaName = RequestsMemory
		}
		req, ok := mean(pods, r, func(c corev1.ResourceRequirements) corev1.ResourceList { return c.Requests })
		if !ok {
			req = fallbackRequest[r]
		}
		d.Request[r] = defaultSize(quotaName, req)
		lim, ok := mean(pods, r, func(c corev1.ResourceRequirements) corev1.ResourceList { return c.Limits })
		if !ok {
			lim = fallbackLimit[r]
		}
		lim = defaultSize(quotaName, lim)
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
func defaultSize(name corev1.ResourceName, q resource.Quantity) resource.Quantity {
	if name == RequestsCPU {
		return roundUp(q.MilliValue(), cpuStep.MilliValue(), cpuStep.MilliValue(), resource.DecimalSI, true)
	}
	return roundUp(q.Value(), memStep.Value(), memStep.Value(), resource.BinarySI, false)
}

func mean(pods []*corev1.Pod, r corev1.ResourceName, of func(corev1.ResourceRequirements) corev1.ResourceList) (resource.Quantity, bool) {
	var sum, n int64
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			if q, ok := of(c.Resources)[r]; ok {
				sum += q.MilliValue()
				n++
			}
		}
	}
	if n == 0 {
		return resource.Quantity{}, false
	}
	return *resource.NewMilliQuantity((sum+n-1)/n, resource.DecimalSI), true
}

// Terminal says whether a pod no longer counts against a quota.
func Terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// PodUse is what pods use as a quota counts it: non-terminal pods and
// their requests and limits, a container without a value counted with
// the defaults a LimitRange would give it (a container with only a limit
// gets it as its request, as the API server does). A pod's value is the
// sum over its containers or its largest init container, whichever is
// larger, plus its overhead.
func PodUse(pods []*corev1.Pod, d Defaults) corev1.ResourceList {
	var n int64
	var reqCPU, reqMem, limCPU, limMem int64
	for _, p := range pods {
		if Terminal(p) {
			continue
		}
		n++
		rc, rm, lc, lm := podValues(p, d)
		reqCPU += rc
		reqMem += rm
		limCPU += lc
		limMem += lm
	}
	return corev1.ResourceList{
		Pods:           *resource.NewQuantity(n, resource.DecimalSI),
		RequestsCPU:    *resource.NewMilliQuantity(reqCPU, resource.DecimalSI),
		RequestsMemory: *resource.NewQuantity(reqMem, resource.BinarySI),
		LimitsCPU:      *resource.NewMilliQuantity(limCPU, resource.DecimalSI),
		LimitsMemory:   *resource.NewQuantity(limMem, resource.BinarySI),
	}
}

// podValues are a pod's CPU (milli) and memory (bytes) requests and limits.
func podValues(p *corev1.Pod, d Defaults) (reqCPU, reqMem, limCPU, limMem int64) {
	sum := func(cs []corev1.Container, init bool) (rc, rm, lc, lm int64) {
		for _, c := range cs {
			req, lim := containerValues(c.Resources, d)
			cpuR, memR := req[corev1.ResourceCPU], req[corev1.ResourceMemory]
			cpuL, memL := lim[corev1.ResourceCPU], lim[corev1.ResourceMemory]
			if init {
				rc, rm = max(rc, cpuR.MilliValue()), max(rm, memR.Value())
				lc, lm = max(lc, cpuL.MilliValue()), max(lm, memL.Value())
				continue
			}
			rc, rm = rc+cpuR.MilliValue(), rm+memR.Value()
			lc, lm = lc+cpuL.MilliValue(), lm+memL.Value()
		}
		return
	}
	rc, rm, lc, lm := sum(p.Spec.Containers, false)
	irc, irm, ilc, ilm := sum(p.Spec.InitContainers, true)
	reqCPU, reqMem, limCPU, limMem = max(rc, irc), max(rm, irm), max(lc, ilc), max(lm, ilm)
	if cpu, ok := p.Spec.Overhead[corev1.ResourceCPU]; ok {
		reqCPU += cpu.MilliValue()
		limCPU += cpu.MilliValue()
	}
	if mem, ok := p.Spec.Overhead[corev1.ResourceMemory]; ok {
		reqMem += mem.Value()
		limMem += mem.Value()
	}
	return
}

// containerValues are a container's requests and limits after a LimitRange
// with defaults d: a missing limit gets the default limit, a missing
// request the limit (if declared) or the default request.
func containerValues(r corev1.ResourceRequirements, d Defaults) (req, lim corev1.ResourceList) {
	req, lim = corev1.ResourceList{}, corev1.ResourceList{}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		l, hasLimit := r.Limits[name]
		q, hasRequest := r.Requests[name]
		switch {
		case hasRequest:
		case hasLimit:
			q = l
		default:
			q = d.Request[name]
		}
		if !hasLimit {
			l = d.Limit[name]
			if l.Cmp(q) < 0 {
				l = q
			}
		}
		req[name], lim[name] = q, l
	}
	return req, lim
}
