// Package deletion decides whether a DELETE may go through. It is one engine
// for every kind: the protection level comes from the object's label or a
// ProtectionPolicy, and what "would cascade" means is a probe chosen by the
// resource (namespace, CRD, workload, or any owner). The decision is a pure
// function of the request and a read-only View of the cluster; the webhook
// in internal/protection/admission builds both and reports the Verdict.
package deletion

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
)

// Request is what the decision needs to know about one DELETE.
type Request struct {
	protection.Object
	UID types.UID
	// Level is the protection that applies; empty means none.
	Level v1alpha1.ProtectionLevel
	// Source says where Level comes from, and so how to lift it.
	Source protection.Source
	// Propagation is the request's DeleteOptions.propagationPolicy.
	Propagation metav1.DeletionPropagation
	// Workload is set for kinds that run pods and may have replicas:
	// Deployment, ReplicaSet, StatefulSet, ReplicationController,
	// DaemonSet, Job, CronJob, and custom resources with a scale
	// subresource.
	Workload bool
	// Replicas is the workload's desired replica count, nil if it has none.
	Replicas *int64
}

// Allow is the verdict for a DELETE no rule objects to.
var Allow = verdict.Allow

// Rule names used in verdicts, events and metrics.
const (
	RuleAlways    = "protection=Always"
	RuleCascading = "protection=Cascading"
)

// Decide judges one DELETE.
func Decide(r Request, v View) verdict.Verdict {
	if r.Source == (protection.Source{}) {
		r.Source.Label = v1alpha1.LabelProtection
	}
	switch r.Level {
	case v1alpha1.ProtectionAlways:
		return verdict.Verdict{
			Reason: RuleAlways,
			Message: fmt.Sprintf("%s is protected by %s, which forbids deleting it (%s=%s). %s",
				r.Describe(), r.Source, v1alpha1.LabelProtection, v1alpha1.ProtectionAlways, r.Source.Lift(r.Object)),
		}
	case v1alpha1.ProtectionCascading:
		findings := probeFor(r)(r, v)
		if len(findings) == 0 {
			return Allow
		}
		return verdict.Verdict{Reason: RuleCascading, Message: cascadingMessage(r, findings)}
	default:
		return Allow
	}
}

// Finding is one way a DELETE would cascade.
type Finding struct {
	// What is counted, in the plural: "non-terminal pods".
	What   string
	Sample Sample
	// Fix is the step that removes this finding, if there is one to give.
	Fix string
}

func (f Finding) String() string {
	s := fmt.Sprintf("%d %s", f.Sample.Count, f.What)
	if len(f.Sample.Examples) > 0 {
		more := ""
		if f.Sample.Count > len(f.Sample.Examples) {
			more = ", …"
		}
		s += " (" + strings.Join(f.Sample.Examples, ", ") + more + ")"
	}
	return s
}

func cascadingMessage(r Request, findings []Finding) string {
	parts := make([]string, len(findings))
	var fixes []string
	for i, f := range findings {
		parts[i] = f.String()
		if f.Fix != "" {
			fixes = append(fixes, f.Fix)
		}
	}
	msg := fmt.Sprintf("%s is protected by %s (%s=%s) and deleting it would cascade to %s.",
		r.Describe(), r.Source, v1alpha1.LabelProtection, v1alpha1.ProtectionCascading, strings.Join(parts, ", "))
	if len(fixes) > 0 {
		msg += " " + strings.Join(fixes, " ")
	}
	return msg + " " + r.Source.Lift(r.Object)
}
