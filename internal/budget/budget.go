// Package budget decides PodUnavailableBudgets: how many of a budget's
// pods must stay available, how many more disruptions it allows given the
// pods available now and the disruptions admitted but not yet observed
// (Compute), whether one more disruption may go through (Judge), and which
// budgets cover a pod (Index). It does no I/O: the admission webhook and
// the status controller are its adapters.
package budget

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Desired is the number of pods the budget keeps available out of total:
// minAvailable (a percentage rounded up), or total minus maxUnavailable
// (a percentage rounded up, as PodDisruptionBudgets round).
func Desired(spec v1alpha1.PodUnavailableBudgetSpec, total int32) (int32, error) {
	switch {
	case spec.MinAvailable != nil:
		n, err := intstr.GetScaledValueFromIntOrPercent(spec.MinAvailable, int(total), true)
		if err != nil {
			return 0, fmt.Errorf("minAvailable: %w", err)
		}
		return min(int32(n), total), nil
	case spec.MaxUnavailable != nil:
		n, err := intstr.GetScaledValueFromIntOrPercent(spec.MaxUnavailable, int(total), true)
		if err != nil {
			return 0, fmt.Errorf("maxUnavailable: %w", err)
		}
		return max(total-int32(n), 0), nil
	default:
		return 0, fmt.Errorf("set maxUnavailable or minAvailable")
	}
}

// Allowed is how many more disruptions may be admitted: the available pods
// above the floor. Available excludes pods not Ready and pods disrupted
// but not yet seen unavailable.
func Allowed(desired, available int32) int32 {
	return max(available-desired, 0)
}
