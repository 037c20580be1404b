package changewindow

import (
	"fmt"
	"strings"
	"time"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
)

// Request is one write to an object a window covers.
type Request struct {
	protection.Object
	// Window names the ChangeWindow, in the object's namespace.
	Window string
	// Changed are the guarded paths the write changes (see Changed).
	Changed []string
	// Override is the reason given in rampart.io/change-override by this
	// request, "" when it gives none.
	Override string
	// MayOverride is set when the requester is one the window names.
	MayOverride bool
	Requester   string
}

// Rule names.
const (
	RuleClosed   = "change-window"
	RuleOverride = "change-window-override"
)

// Overridden says whether an override let the write through outside the
// window.
func Overridden(v verdict.Verdict) bool { return v.Allowed && v.Reason == RuleOverride }

// Decide decides one write at now. A write let through by an override is
// allowed under RuleOverride (see Overridden): it must be recorded.
func Decide(r Request, w *Window, now time.Time) verdict.Verdict {
	if len(r.Changed) == 0 {
		return verdict.Allow
	}
	open, freeze := w.Open(now)
	if open {
		return verdict.Allow
	}
	if r.Override != "" && r.MayOverride {
		return verdict.Verdict{Allowed: true, Reason: RuleOverride,
			Message: fmt.Sprintf("%s overrode ChangeWindow %q to change %s of %s: %s",
				r.Requester, r.Window, strings.Join(r.Changed, ", "), r.Describe(), r.Override)}
	}
	closed := "is closed"
	if freeze != nil {
		closed = fmt.Sprintf("is frozen until %s", freeze.End.In(w.Location).Format(time.RFC3339))
		if freeze.Reason != "" {
			closed += " (" + freeze.Reason + ")"
		}
	}
	msg := fmt.Sprintf("ChangeWindow %q %s: %s may not change %s now.",
		r.Window, closed, r.Describe(), strings.Join(r.Changed, ", "))
	if next := w.NextOpen(now); next != nil {
		msg += fmt.Sprintf(" It next opens at %s (in %s).", next.In(w.Location).Format("2006-01-02 15:04 MST"), next.Sub(now).Round(time.Minute))
	} else {
		msg += fmt.Sprintf(" It does not open in the next %d days.", int(Horizon.Hours()/24))
	}
	switch {
	case r.Override != "":
		msg += fmt.Sprintf(" The override by %s is refused: the window lets only the users, groups and service accounts in its spec.override override it.", r.Requester)
	default:
		msg += fmt.Sprintf(" In an emergency, a user the window names may set annotation %s=<reason> in the same request (it is recorded).", v1alpha1.AnnotationChangeOverride)
	}
	return verdict.Verdict{Reason: RuleClosed, Message: msg}
}
