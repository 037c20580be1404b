package budget

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestDesiredAndAllowed(t *testing.T) {
	pct := intstr.FromString
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	str := func(s string) *intstr.IntOrString { v := pct(s); return &v }
	for _, tt := range []struct {
		name                      string
		spec                      v1alpha1.PodUnavailableBudgetSpec
		total, available, pending int32
		desired, allowed          int32
	}{
		{"maxUnavailable 25% of 20: 5 may go", v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: str("25%")}, 20, 20, 0, 15, 5},
		{"maxUnavailable 25% of 10 rounds up to 3", v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: str("25%")}, 10, 10, 0, 7, 3},
		{"minAvailable 50% of 5 rounds up to 3", v1alpha1.PodUnavailableBudgetSpec{MinAvailable: str("50%")}, 5, 5, 0, 3, 2},
		{"a not-Ready pod uses the budget", v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: num(2)}, 10, 9, 0, 8, 1},
		{"admitted but unobserved disruptions use it too", v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: num(2)}, 10, 10, 2, 8, 0},
		{"below the floor nothing is allowed, never negative", v1alpha1.PodUnavailableBudgetSpec{MinAvailable: num(8)}, 10, 6, 1, 8, 0},
		{"minAvailable above total keeps all", v1alpha1.PodUnavailableBudgetSpec{MinAvailable: num(30)}, 10, 10, 0, 10, 0},
		{"maxUnavailable 100% lets all go", v1alpha1.PodUnavailableBudgetSpec{MaxUnavailable: str("100%")}, 4, 4, 0, 0, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Desired(tt.spec, tt.total)
			if err != nil {
				t.Fatal(err)
			}
			if a := Allowed(d, tt.available-tt.pending); d != tt.desired || a != tt.allowed {
				t.Fatalf("desired %d allowed %d, want %d %d", d, a, tt.desired, tt.allowed)
			}
		})
	}
}
