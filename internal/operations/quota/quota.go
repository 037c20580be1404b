// Package quota sizes ResourceQuotas and LimitRanges from what namespaces
// really use: the peak the manager has seen over a window, or the current
// use where it has seen nothing, plus a margin. The sizing is pure; the
// reads and writes of a plan are in cluster.go (Observe, Apply), the
// manager's quotawatch controller keeps the peaks.
package quota

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The resources a plan sizes. Object counts use the count/<resource>.<group>
// form, which the API server's quota admission understands for every kind.
const (
	Pods           corev1.ResourceName = corev1.ResourcePods
	RequestsCPU    corev1.ResourceName = corev1.ResourceRequestsCPU
	RequestsMemory corev1.ResourceName = corev1.ResourceRequestsMemory
	LimitsCPU      corev1.ResourceName = corev1.ResourceLimitsCPU
	LimitsMemory   corev1.ResourceName = corev1.ResourceLimitsMemory
)

// PodResources are the resources that pods use and the manager tracks
// peaks of.
var PodResources = []corev1.ResourceName{Pods, RequestsCPU, RequestsMemory, LimitsCPU, LimitsMemory}

// Counted are the object kinds a plan caps, each as its quota resource.
var Counted = []corev1.ResourceName{
	"count/configmaps", "count/secrets", "count/services", "count/persistentvolumeclaims",
	"count/deployments.apps", "count/jobs.batch",
}

// DefaultMargin is the headroom a plan adds above the observed peak.
const DefaultMargin = 0.20

// Rounding: CPU up to the next 100m, memory up to the next 64Mi, counts up
// to the next whole object. The floors keep a namespace that uses nothing
// yet able to run one small pod.
var (
	cpuStep   = resource.MustParse("100m")
	memStep   = resource.MustParse("64Mi")
	minCPU    = resource.MustParse("100m")
	minMemory = resource.MustParse("128Mi")
)

// Size is the hard limit for each resource of peak: peak × (1+margin),
// rounded up to a sensible unit, never below the floor.
func Size(peak corev1.ResourceList, margin float64) corev1.ResourceList {
	hard := corev1.ResourceList{}
	for name, q := range peak {
		hard[name] = sizeOne(name, q, margin)
	}
	return hard
}

func sizeOne(name corev1.ResourceName, q resource.Quantity, margin float64) resource.Quantity {
	switch name {
	case RequestsCPU, LimitsCPU:
		return roundUp(scaled(q.MilliValue(), margin), cpuStep.MilliValue(), minCPU.MilliValue(), resource.DecimalSI, true)
	case RequestsMemory, LimitsMemory:
		return roundUp(scaled(q.Value(), margin), memStep.Value(), minMemory.Value(), resource.BinarySI, false)
	default:
		return roundUp(scaled(q.Value(), margin), 1, 1, resource.DecimalSI, false)
	}
}

// scaled is v × (1+margin), rounded up: a margin never shrinks a limit.
func scaled(v int64, margin float64) int64 {
	return int64(math.Ceil(float64(v) * (1 + max(margin, 0))))
}

func roundUp(v, step, floor int64, format resource.Format, milli bool) resource.Quantity {
	v = max(v, floor)
	v = (v + step - 1) / step * step
	if milli {
		return *resource.NewMilliQuantity(v, format)
	}
	return *resource.NewQuantity(v, format)
}

// Max is, for each resource in a or b, the larger of the two.
func Max(a, b corev1.ResourceList) corev1.ResourceList {
	out := a.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, q := range b {
		if cur, ok := out[name]; !ok || q.Cmp(cur) > 0 {
			out[name] = q.DeepCopy()
		}
	}
	return out
}
