// Package replicas decides whether a change of a workload's spec.replicas
// may go through on an object whose replica changes must be explicit: the
// request itself must say the new count in the rampart.io/confirm-replicas
// annotation, so a typo or a stray script cannot scale a key workload to 0.
package replicas

import (
	"fmt"
	"strconv"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
)

// Request is one write that may change spec.replicas.
type Request struct {
	protection.Object
	// Guard says which changes need confirmation; empty means none.
	Guard  v1alpha1.ReplicaGuard
	Source protection.Source
	// Old and New are the replicas before and after the write.
	Old, New int64
	// Confirm is the rampart.io/confirm-replicas annotation of the new
	// object, "" when absent.
	Confirm string
	// Scale is set for writes through the scale subresource, which carry no
	// annotations (kubectl scale, autoscalers).
	Scale bool
	// Exempt is set when the requester is exempt from the rule.
	Exempt bool
}

// Rule names.
const (
	RuleExplicitReplicas = "explicit-replicas"
)

// Decide judges one write.
func Decide(r Request) verdict.Verdict {
	if r.Old == r.New || r.Exempt || !guarded(r.Guard, r.Old, r.New) {
		return verdict.Allow
	}
	if r.Source == (protection.Source{}) {
		r.Source.Label = v1alpha1.LabelExplicitReplicas
	}
	want := strconv.FormatInt(r.New, 10)
	if !r.Scale && r.Confirm == want {
		return verdict.Allow
	}
	change := fmt.Sprintf("changing the replicas of %s from %d to %d needs confirmation (%s, guard %s).",
		r.Describe(), r.Old, r.New, r.Source, guardName(r.Guard))
	confirmed := r.Kubectl("rampart scale", fmt.Sprintf("%s --replicas %d", r.Ref(), r.New))
	var msg string
	switch {
	case r.Scale:
		msg = fmt.Sprintf("%s The scale subresource (kubectl scale, autoscalers) cannot carry the confirmation; "+
			"make the confirmed change with: %s.", change, confirmed)
	case r.Confirm == "":
		msg = fmt.Sprintf("%s Set annotation %s=%q in the same request, or run: %s.",
			change, v1alpha1.AnnotationConfirmReplicas, want, confirmed)
	default:
		msg = fmt.Sprintf("%s The request confirms %s=%q, which is not the new count %s. Run: %s.",
			change, v1alpha1.AnnotationConfirmReplicas, r.Confirm, want, confirmed)
	}
	return verdict.Verdict{Reason: RuleExplicitReplicas, Message: msg + " " + r.Source.Lift(r.Object)}
}

// guarded says whether the guard covers a change from old to new.
func guarded(g v1alpha1.ReplicaGuard, old, new int64) bool {
	switch g {
	case v1alpha1.GuardAll:
		return true
	case v1alpha1.GuardDecrease:
		return new < old
	case v1alpha1.GuardToZero:
		return new == 0
	default:
		return false
	}
}

func guardName(g v1alpha1.ReplicaGuard) string {
	switch g {
	case v1alpha1.GuardDecrease:
		return "Decrease: decreases only"
	case v1alpha1.GuardToZero:
		return "ToZero: scaling to 0 only"
	default:
		return "All: every change"
	}
}
