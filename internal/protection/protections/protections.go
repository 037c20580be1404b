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
	labels "github.com/rampart-io/rampart/internal/protection/labels/admit"
	nodebudget "github.com/rampart-io/rampart/internal/protection/nodebudget/admit"
	objects "github.com/rampart-io/rampart/internal/protection/objects/admit"
	policy "github.com/rampart-io/rampart/internal/protection/policy/admit"
	probe "github.com/rampart-io/rampart/internal/protection/probe/admit"
	recyclebin "github.com/rampart-io/rampart/internal/protection/recyclebin/admit"
	scale "github.com/rampart-io/rampart/internal/protection/scale/admit"
)

// All are every protection, new (Initialize gives each what it asks for).
func All() []admission.Protection {
	return []admission.Protection{
		&labels.Plugin{},
		&policy.Plugin{},
		&changewindow.Plugin{},
		&flowcontrol.Plugin{},
		&nodebudget.Plugin{},
		&budget.Plugin{},
		&objects.Plugin{},
		&scale.Plugin{},
		&budget.GeneratedPlugin{},
		&probe.Plugin{},
		&recyclebin.Plugin{},
	}
}

// Kinds are every protection's kinds of object.
func Kinds() []admission.ObjectKind { return admission.Kinds(All()) }
