package budget

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// FuzzDesired: for any budget spec the API could hold and any pod count,
// Desired either says what is wrong or keeps between 0 and total pods
// available, so Allowed never lets more pods go than are available.
func FuzzDesired(f *testing.F) {
	for _, s := range []string{
		`{"maxUnavailable":"25%"}`, `{"minAvailable":"100%"}`, `{"maxUnavailable":1}`, `{"minAvailable":0}`,
		`{"minAvailable":"99999999999%"}`, `{"maxUnavailable":"-5%"}`, `{"minAvailable":-3}`, `{"maxUnavailable":"1.5%"}`,
		`{"selector":{"matchExpressions":[{"key":"app","operator":"In","values":["web"]}]},"minAvailable":"50%"}`,
	} {
		f.Add([]byte(s), int32(7), int32(5))
	}
	f.Fuzz(func(t *testing.T, spec []byte, total, available int32) {
		var s v1alpha1.PodUnavailableBudgetSpec
		if json.Unmarshal(spec, &s) != nil || total < 0 || available < 0 || available > total {
			return
		}
		d, err := Desired(s, total)
		if err != nil {
			return
		}
		if d < 0 || d > total {
			t.Fatalf("Desired(%s, %d) = %d: outside 0..%d", spec, total, d, total)
		}
		if a := Allowed(d, available); a < 0 || a > available {
			t.Fatalf("Allowed(%d, %d) = %d", d, available, a)
		}
		b := &v1alpha1.PodUnavailableBudget{Spec: s}
		if _, _, _, err := Selectors(b); err == nil {
			_, _ = CoversLabels(b, map[string]string{"app": "web"})
		}
	})
}

// FuzzGeneratedSize: the annotations of a workload (outside input, written
// by anyone who may edit it) give a size of 0 or more, or an error.
func FuzzGeneratedSize(f *testing.F) {
	for _, s := range []string{"3", "25%", "100%", "101%", "-1", "3000000000", " 7 ", "%", "1e3"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, value string, max bool) {
		key := v1alpha1.AnnotationGeneratePUBMinAvailable
		if max {
			key = v1alpha1.AnnotationGeneratePUBMaxUnavailable
		}
		maxU, minA, err := GeneratedSize(map[string]string{key: value}, nil)
		if err != nil {
			return
		}
		for _, v := range []*intstr.IntOrString{maxU, minA} {
			if v == nil {
				continue
			}
			n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
			if err != nil || n < 0 {
				t.Fatalf("GeneratedSize(%s=%q) = %v: %d, %v", key, value, v, n, err)
			}
		}
	})
}
