// Package protections names every protection, in the order of their
// webhooks in Rampart's ValidatingWebhookConfiguration: the one line a
// new protection adds outside its own folder (as kube-apiserver's ordered
// list of admission plugins).
package protections

import (
	"github.com/rampart-io/rampart/internal/protection/admission"
	budget "github.com/rampart-io/rampart/internal/protection/budget/admit"
	changewindow "github.com/rampart-io/rampart/internal/protection/changewindow/admit"
	flowcontrol "github.com/rampart-io/rampart/internal/protection/flowcontrol/admit"
	nodebudget "github.com/rampart-io/rampart/internal/protection/nodebudget/admit"
	policy "github.com/rampart-io/rampart/internal/protection/policy/admit"
	recyclebin "github.com/rampart-io/rampart/internal/protection/recyclebin/admit"
)

// All are every protection, new (Initialize gives each what it asks for).
func All() []admission.Protection {
	return []admission.Protection{
		&admission.LabelsPlugin{},
		&policy.Plugin{},
		&changewindow.Plugin{},
		&flowcontrol.Plugin{},
		&nodebudget.Plugin{},
		&budget.Plugin{},
		&admission.ObjectsPlugin{},
		&admission.ScalePlugin{},
		&budget.GeneratedPlugin{},
		&admission.ProbePlugin{},
		&recyclebin.Plugin{},
	}
}

// Kinds are every protection's kinds of object.
func Kinds() []admission.ObjectKind { return admission.Kinds(All()) }
