// Package deletion decides whether a DELETE may go through. The decision is
// a pure function of the request; the webhook in internal/admission is a thin
// adapter that builds the Request and reports the Verdict.
package deletion

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Request is what the decision needs to know about one DELETE.
type Request struct {
	Resource schema.GroupResource
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	Name      string
	// Labels are the labels of the object being deleted.
	Labels map[string]string
}

// Verdict is the decision on one DELETE.
type Verdict struct {
	Allowed bool
	// Rule names the rule that denied, e.g. "protection=Always"; it is a
	// bounded set, fit for a metric label.
	Rule string
	// Message tells the requester what was denied, why, and how to proceed.
	Message string
}

// Allow is the verdict for a DELETE no rule objects to.
var Allow = Verdict{Allowed: true}

// Rule names used in verdicts, events and metrics.
const (
	RuleAlways = "protection=Always"
)

// Decide judges one DELETE.
func Decide(r Request) Verdict {
	switch v1alpha1.ProtectionLevel(r.Labels[v1alpha1.LabelProtection]) {
	case v1alpha1.ProtectionAlways:
		return Verdict{
			Rule: RuleAlways,
			Message: fmt.Sprintf("%s is protected by label %s=%s, which forbids deleting it. "+
				"If the deletion is intended, remove the label first: %s",
				describe(r), v1alpha1.LabelProtection, v1alpha1.ProtectionAlways, unlabelCommand(r)),
		}
	default:
		return Allow
	}
}

// describe names the object as kubectl users know it: `namespace "prod"`,
// `deployments.apps "web" in namespace "shop"`.
func describe(r Request) string {
	s := fmt.Sprintf("%s %q", resourceName(r.Resource), r.Name)
	if r.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", r.Namespace)
	}
	return s
}

func resourceName(gr schema.GroupResource) string {
	if gr.Group == "" {
		return singular(gr.Resource)
	}
	return gr.Resource + "." + gr.Group
}

// singular turns the core plurals kubectl users type in their singular form
// ("namespaces" -> "namespace"); kubectl accepts both.
func singular(plural string) string {
	if n := len(plural); n > 1 && plural[n-1] == 's' {
		return plural[:n-1]
	}
	return plural
}

func unlabelCommand(r Request) string {
	cmd := "kubectl label "
	if r.Namespace != "" {
		cmd += "-n " + r.Namespace + " "
	}
	return cmd + resourceName(r.Resource) + "/" + r.Name + " " + v1alpha1.LabelProtection + "-"
}
