// Package protection holds what Rampart's protections share: how an object
// and the source of its protection are named in denials. Each protection is
// a package of its own below this one (deletion, replicas), with a pure
// decision function.
package protection

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object names the object a request is about.
type Object struct {
	Resource schema.GroupResource
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	Name      string
}

// Describe names the object as kubectl users know it: `namespace "prod"`,
// `deployments.apps "web" in namespace "shop"`.
func (o Object) Describe() string {
	s := fmt.Sprintf("%s %q", ResourceName(o.Resource), o.Name)
	if o.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", o.Namespace)
	}
	return s
}

// Ref is RESOURCE/NAME as kubectl accepts it.
func (o Object) Ref() string { return ResourceName(o.Resource) + "/" + o.Name }

// Kubectl renders a command run against the object's namespace.
func (o Object) Kubectl(verb, args string) string {
	cmd := "kubectl " + verb + " "
	if o.Namespace != "" {
		cmd += "-n " + o.Namespace + " "
	}
	return cmd + args
}

// ResourceName is the resource as kubectl accepts it: core resources in
// the singular ("namespace"), others qualified by group
// ("deployments.apps").
func ResourceName(gr schema.GroupResource) string {
	if gr.Group == "" {
		if n := len(gr.Resource); n > 1 && gr.Resource[n-1] == 's' {
			return gr.Resource[:n-1]
		}
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// Source is where a protection comes from.
type Source struct {
	// Policy names the ProtectionPolicy; empty means a label on the object.
	Policy string
	// Label is the label key when Policy is empty.
	Label string
}

func (s Source) String() string {
	if s.Policy == "" {
		return "label " + s.Label
	}
	return fmt.Sprintf("ProtectionPolicy %q", s.Policy)
}

// Lift says how to remove the protection when the change is intended.
func (s Source) Lift(o Object) string {
	if s.Policy != "" {
		return fmt.Sprintf("If this is intended, ask for an exemption in the policy or change it: kubectl edit protectionpolicy %s", s.Policy)
	}
	return "If this is intended, remove the label first: " + o.Kubectl("label", o.Ref()+" "+s.Label+"-")
}
