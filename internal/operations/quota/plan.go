package quota

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Name is the name of the ResourceQuota and LimitRange a plan proposes.
const Name = "rampart"

// Observed is what a plan is sized from for one namespace.
type Observed struct {
	Namespace string
	// Current is the use now: pods (PodUse) and object counts.
	Current corev1.ResourceList
	// Peak is the peak the manager tracked over its window; nil when it
	// has none for this namespace.
	Peak corev1.ResourceList
	// Defaults are the LimitRange defaults (LimitDefaults).
	Defaults Defaults
}

// Plan is the proposal for one namespace.
type Plan struct {
	Namespace string
	// FromPeak says the sizes come from a tracked peak, not only from
	// the current use.
	FromPeak   bool
	Quota      *corev1.ResourceQuota
	LimitRange *corev1.LimitRange
}

// PlanFor sizes the quota of o: the larger of its peak and its current
// use, plus margin.
func PlanFor(o Observed, margin float64) Plan {
	base := Max(o.Current, o.Peak)
	return Plan{
		Namespace: o.Namespace,
		FromPeak:  o.Peak != nil,
		Quota: &corev1.ResourceQuota{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ResourceQuota"},
			ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: o.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
			Spec:       corev1.ResourceQuotaSpec{Hard: Size(base, margin)},
		},
		LimitRange: &corev1.LimitRange{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "LimitRange"},
			ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: o.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "rampart"}},
			Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
				Type:           corev1.LimitTypeContainer,
				DefaultRequest: o.Defaults.Request,
				Default:        o.Defaults.Limit,
			}}},
		},
	}
}

// Diff lists, one line per resource, how the proposed hard limits differ
// from those of the quotas in place (the tightest where several cap the
// same resource); empty when they agree.
func Diff(proposed corev1.ResourceList, inPlace []corev1.ResourceQuota) []string {
	current := corev1.ResourceList{}
	for _, q := range inPlace {
		for name, v := range q.Spec.Hard {
			if cur, ok := current[name]; !ok || v.Cmp(cur) < 0 {
				current[name] = v
			}
		}
	}
	names := map[corev1.ResourceName]bool{}
	for n := range proposed {
		names[n] = true
	}
	for n := range current {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, string(n))
	}
	slices.Sort(sorted)
	var out []string
	for _, n := range sorted {
		p, hasP := proposed[corev1.ResourceName(n)]
		c, hasC := current[corev1.ResourceName(n)]
		switch {
		case hasP && !hasC:
			out = append(out, fmt.Sprintf("+ %s: %s", n, p.String()))
		case !hasP && hasC:
			out = append(out, fmt.Sprintf("  %s: %s (kept: not planned)", n, c.String()))
		case p.Cmp(c) != 0:
			out = append(out, fmt.Sprintf("~ %s: %s -> %s", n, c.String(), p.String()))
		}
	}
	return out
}

// Ratio is used/hard of one resource of one quota.
type Ratio struct {
	Namespace, Quota string
	Resource         corev1.ResourceName
	Used, Hard       resource.Quantity
	// Value is used/hard; 1 when hard is zero and something is used.
	Value float64
}

// Headroom is hard − used in the resource's base unit (cores, bytes, objects).
func (r Ratio) Headroom() float64 {
	return r.Hard.AsApproximateFloat64() - r.Used.AsApproximateFloat64()
}

// Ratios are the used/hard ratios of a quota's status.
func Ratios(q *corev1.ResourceQuota) []Ratio {
	var out []Ratio
	for name, hard := range q.Status.Hard {
		used := q.Status.Used[name]
		r := Ratio{Namespace: q.Namespace, Quota: q.Name, Resource: name, Used: used, Hard: hard}
		switch h := hard.AsApproximateFloat64(); {
		case h > 0:
			r.Value = used.AsApproximateFloat64() / h
		case used.Sign() > 0:
			r.Value = 1
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Ratio) int { return strings.Compare(string(a.Resource), string(b.Resource)) })
	return out
}

// Closest are the namespaces nearest their limits, by their highest ratio,
// at most n of them, highest first.
func Closest(quotas []corev1.ResourceQuota, n int) []Ratio {
	worst := map[string]Ratio{}
	for i := range quotas {
		for _, r := range Ratios(&quotas[i]) {
			if w, ok := worst[r.Namespace]; !ok || r.Value > w.Value {
				worst[r.Namespace] = r
			}
		}
	}
	out := make([]Ratio, 0, len(worst))
	for _, r := range worst {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Ratio) int {
		if a.Value != b.Value {
			if a.Value > b.Value {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Namespace, b.Namespace)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
