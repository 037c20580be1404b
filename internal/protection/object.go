// Package protection holds what Rampart's protections share: how an object
// and the source of its protection are named in denials. Each protection is
// a package of its own below this one (deletion, replicas), with a pure
// decision function.
package protection

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object names the object a request is about.
type Object struct {
	Resource schema.GroupResource
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	Name      string
	// Singular is the resource's singular name as discovery serves it
	// (see Singular); empty for a guess.
	Singular string
}

// Describe names the object as kubectl users know it: `namespace "prod"`,
// `deployments.apps "web" in namespace "shop"`.
func (o Object) Describe() string {
	s := fmt.Sprintf("%s %q", o.ResourceName(), o.Name)
	if o.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", o.Namespace)
	}
	return s
}

// Ref is RESOURCE/NAME as kubectl accepts it.
func (o Object) Ref() string { return o.ResourceName() + "/" + o.Name }

// Kubectl renders a command run against the object's namespace.
func (o Object) Kubectl(verb, args string) string {
	cmd := "kubectl " + verb + " "
	if o.Namespace != "" {
		cmd += "-n " + o.Namespace + " "
	}
	return cmd + args
}

// ResourceName is the resource as kubectl accepts it: core resources in
// the singular ("namespace", "endpoints"), others qualified by group
// ("deployments.apps"). Without the singular from discovery, a trailing
// "s" is dropped, which is right for most core resources but not all.
func (o Object) ResourceName() string {
	if o.Resource.Group != "" {
		return o.Resource.Resource + "." + o.Resource.Group
	}
	if o.Singular != "" {
		return o.Singular
	}
	if n := len(o.Resource.Resource); n > 1 && o.Resource.Resource[n-1] == 's' {
		return o.Resource.Resource[:n-1]
	}
	return o.Resource.Resource
}

// Singular is a core resource's singular name from a RESTMapper built from
// discovery (ResourceSingularizer), or "" when it has none; resources of
// other groups are named by their plural, and need none.
func Singular(m meta.RESTMapper, gr schema.GroupResource) string {
	if m == nil || gr.Group != "" {
		return ""
	}
	// A lazy mapper (controller-runtime's) loads a group on a lookup by
	// resource; the singularizer alone reads only what is loaded.
	if _, err := m.KindFor(gr.WithVersion("")); err != nil {
		return ""
	}
	s, err := m.ResourceSingularizer(gr.Resource)
	if err != nil {
		return ""
	}
	return s
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
