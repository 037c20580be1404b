// Package budget decides PodUnavailableBudgets: how many of a budget's
// pods must stay available, how many more disruptions it allows given the
// pods available now and the disruptions admitted but not yet observed
// (Compute), whether one more disruption may go through (Judge), and which
// budgets cover a pod (Index). It does no I/O: the admission webhook and
// the status controller are its adapters.
package budget

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Desired is the number of pods the budget keeps available out of total:
// minAvailable (a percentage rounded up), or total minus maxUnavailable
// (a percentage rounded up, as PodDisruptionBudgets round).
func Desired(spec v1alpha1.PodUnavailableBudgetSpec, total int32) (int32, error) {
	switch {
	case spec.MinAvailable != nil:
		n, err := scaled("minAvailable", spec.MinAvailable, total)
		return n, err
	case spec.MaxUnavailable != nil:
		n, err := scaled("maxUnavailable", spec.MaxUnavailable, total)
		if err != nil {
			return 0, err
		}
		return total - n, nil
	default:
		return 0, fmt.Errorf("set maxUnavailable or minAvailable")
	}
}

// scaled is a size's count of total pods, at most total. Sizes the CRD
// would refuse (a negative count, a percentage outside 0%..100%) are
// refused here too: read as they are, they wrap round int32 and leave a
// budget that keeps nothing available.
func scaled(name string, v *intstr.IntOrString, total int32) (int32, error) {
	bad := fmt.Errorf("%s %s: want a count of 0 or more, or a percentage from 0%% to 100%%", name, v.String())
	if v.Type == intstr.String {
		p, ok := strings.CutSuffix(v.StrVal, "%")
		if n, err := strconv.Atoi(p); !ok || err != nil || n < 0 || n > 100 {
			return 0, bad
		}
	} else if v.IntVal < 0 {
		return 0, bad
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, int(total), true)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return int32(min(n, int(total))), nil
}

// Allowed is how many more disruptions may be admitted: the available pods
// above the floor. Available excludes pods not Ready and pods disrupted
// but not yet seen unavailable.
func Allowed(desired, available int32) int32 {
	return max(available-desired, 0)
}

// NeverAllows says whether a budget's spec alone forbids every healthy
// pod's disruption, whatever its pods: maxUnavailable 0 (or 0%), or
// minAvailable 100%. why says which, for Events and denials.
func NeverAllows(spec v1alpha1.PodUnavailableBudgetSpec) (never bool, why string) {
	if m := spec.MaxUnavailable; m != nil && (m.String() == "0" || m.String() == "0%") {
		return true, "maxUnavailable is " + m.String()
	}
	if m := spec.MinAvailable; m != nil && m.String() == "100%" {
		return true, "minAvailable is 100%"
	}
	if c := spec.MaxGroupsDisrupted; c != nil && *c == 0 && Grouped(spec) {
		return true, "maxGroupsDisrupted is 0"
	}
	return false, ""
}

// BlocksAll says whether a budget, as computed now, can allow no healthy
// pod's disruption: NeverAllows, or a minAvailable at or above the pods it
// covers. st is the budget's computed status. The second holds while the
// workload keeps its size; for bare pods it can be passing (a pod just
// deleted lowers the total), hence the alert's wait.
func BlocksAll(spec v1alpha1.PodUnavailableBudgetSpec, st v1alpha1.PodUnavailableBudgetStatus) (blocks bool, why string) {
	if never, why := NeverAllows(spec); never {
		return true, why
	}
	if spec.MinAvailable != nil && st.TotalReplicas > 0 && st.DesiredAvailable >= st.TotalReplicas {
		return true, fmt.Sprintf("minAvailable %s keeps all %d pods", spec.MinAvailable.String(), st.TotalReplicas)
	}
	return false, ""
}
