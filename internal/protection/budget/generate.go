package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

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
