package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// DefaultMaxUnavailable sizes a generated budget when neither the
// workload's annotations nor its rollout strategy say.
var DefaultMaxUnavailable = intstr.FromString("25%")

// GeneratedSize is the size of the budget generated for a workload
// annotated rampart.io/generate-pub: its -max-unavailable or
// -min-available annotation, else its rolling update's maxUnavailable
// (nil when it has none), else 25%.
func GeneratedSize(annotations map[string]string, rollingMaxUnavailable *intstr.IntOrString) (maxUnavailable, minAvailable *intstr.IntOrString, err error) {
	maxA, hasMax := annotations[v1alpha1.AnnotationGeneratePUBMaxUnavailable]
	minA, hasMin := annotations[v1alpha1.AnnotationGeneratePUBMinAvailable]
	switch {
	case hasMax && hasMin:
		return nil, nil, fmt.Errorf("set one of %s and %s, not both", v1alpha1.AnnotationGeneratePUBMaxUnavailable, v1alpha1.AnnotationGeneratePUBMinAvailable)
	case hasMax:
		v, err := parseSize(v1alpha1.AnnotationGeneratePUBMaxUnavailable, maxA)
		return v, nil, err
	case hasMin:
		v, err := parseSize(v1alpha1.AnnotationGeneratePUBMinAvailable, minA)
		return nil, v, err
	case rollingMaxUnavailable != nil:
		v := *rollingMaxUnavailable
		return &v, nil, nil
	default:
		v := DefaultMaxUnavailable
		return &v, nil, nil
	}
}

// GeneratedSpec is the spec of the budget generated for a workload
// annotated rampart.io/generate-pub, without its target: its size (see
// GeneratedSize) and, when the annotations ask, its groups.
func GeneratedSpec(annotations map[string]string, rollingMaxUnavailable *intstr.IntOrString) (v1alpha1.PodUnavailableBudgetSpec, error) {
	var spec v1alpha1.PodUnavailableBudgetSpec
	key, grouped := annotations[v1alpha1.AnnotationGeneratePUBGroupBy]
	maxGroups, capped := annotations[v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted]
	gang := annotations[v1alpha1.AnnotationGeneratePUBGang] == "true"
	switch {
	case grouped && strings.TrimSpace(key) == "":
		return spec, fmt.Errorf("%s is empty: name the pod (or node) label whose value groups the pods", v1alpha1.AnnotationGeneratePUBGroupBy)
	case (capped || gang) && !grouped:
		return spec, fmt.Errorf("%s and %s need %s: the label whose value groups the pods",
			v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted, v1alpha1.AnnotationGeneratePUBGang, v1alpha1.AnnotationGeneratePUBGroupBy)
	case gang && !capped:
		return spec, fmt.Errorf("%s needs %s: how many groups may be broken at once", v1alpha1.AnnotationGeneratePUBGang, v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted)
	}
	if grouped {
		spec.GroupBy = &v1alpha1.PodGroupBy{LabelKey: strings.TrimSpace(key)}
	}
	if capped {
		n, err := strconv.ParseInt(strings.TrimSpace(maxGroups), 10, 32)
		if err != nil || n < 0 {
			return spec, field.Invalid(field.NewPath("metadata", "annotations").Key(v1alpha1.AnnotationGeneratePUBMaxGroupsDisrupted), maxGroups, "a count of 0 or more")
		}
		spec.MaxGroupsDisrupted = ptr.To(int32(n))
	}
	if gang {
		_, hasMax := annotations[v1alpha1.AnnotationGeneratePUBMaxUnavailable]
		_, hasMin := annotations[v1alpha1.AnnotationGeneratePUBMinAvailable]
		if hasMax || hasMin {
			return spec, fmt.Errorf("a gang budget counts whole groups: remove %s and %s", v1alpha1.AnnotationGeneratePUBMaxUnavailable, v1alpha1.AnnotationGeneratePUBMinAvailable)
		}
		spec.Gang = true
		return spec, nil
	}
	var err error
	spec.MaxUnavailable, spec.MinAvailable, err = GeneratedSize(annotations, rollingMaxUnavailable)
	return spec, err
}

// parseSize reads "3" or "25%" as the CRD would accept it.
func parseSize(key, s string) (*intstr.IntOrString, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		if n, err := strconv.Atoi(p); err == nil && n >= 0 && n <= 100 {
			v := intstr.FromString(s)
			return &v, nil
		}
	} else if n, err := strconv.Atoi(s); err == nil && n >= 0 && n <= math.MaxInt32 {
		v := intstr.FromInt32(int32(n))
		return &v, nil
	}
	return nil, field.Invalid(field.NewPath("metadata", "annotations").Key(key), s, "a count of 0 or more, or a percentage from 0% to 100%")
}
