package compiled

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DeletionName and ReplicasName are the names of a ProtectionPolicy's
// compiled policies, those of its webhooks.
func DeletionName(p string) string { return p + ".deletion.policy.rampart.io" }

// ReplicasName: see DeletionName.
func ReplicasName(p string) string { return p + ".replicas.policy.rampart.io" }

// LabelScaledName is the name of the explicit-replicas label's compiled
// policy for a custom resource, after its CRD: the webhook it backs is
// replicas.rampart.io.
func LabelScaledName(crd string) string { return crd + ".replicas.rampart.io" }

// ScaledReplicasName is the name of a ProtectionPolicy's compiled policy
// for the replicas of the custom resource of a CRD.
func ScaledReplicasName(p, crd string) string { return p + ".replicas." + crd + ".policy.rampart.io" }

// Names are the names of the compiled policies claimed so far, each with
// the source that holds it as messages name it.
//
// The API server keeps one ValidatingAdmissionPolicy (and binding) per
// name: two sources compiled to one name would overwrite each other's
// rule. The names fall into families told apart by the label before
// "rampart.io": the label rules' (deletion.rampart.io,
// replicas.rampart.io, CRD.replicas.rampart.io), a ProtectionPolicy's
// (P.deletion.policy.rampart.io, P.replicas.policy.rampart.io,
// P.replicas.CRD.policy.rampart.io) and the manager's probe
// (probe.compiled.rampart.io). The label rules never clash among
// themselves: a CRD is named PLURAL.GROUP with a dot in GROUP, so
// CRD.replicas.rampart.io has five labels or more and is that CRD's alone.
// A ProtectionPolicy's name may hold dots, though, and a CRD's group may
// end in any label, so two policies can clash:
//
//	DeletionName("a.replicas.w.x")           == ScaledReplicasName("a", "w.x.deletion")
//	ReplicasName("a.replicas.w.x")           == ScaledReplicasName("a", "w.x.replicas")
//	ScaledReplicasName("a.replicas.w", "x.y.z") == ScaledReplicasName("a", "w.replicas.x.y.z")
//
// Two policies whose names have no dots never clash: then P.deletion and
// P.replicas have two labels, the second telling them apart, where
// P.replicas.CRD has five or more and its first label is P. So Claim
// gives a name to the first source to compile it and leaves the later one
// to the webhooks, which judge every policy anyway.
type Names map[string]string

// Left is a compiled policy left to Rampart's webhooks (which hold it
// while Rampart runs, not while it is down), and why.
type Left struct {
	// Policy is the ProtectionPolicy it was compiled from; empty for the
	// label rules.
	Policy string
	// Name is the compiled policy's name.
	Name string
	Why  string
}

// Claim claims for one source (policy: the ProtectionPolicy's name, empty
// for the label rules) the names of its compiled policies ps: it keeps
// those whose names the API server takes (a DNS subdomain of at most 253
// characters) and no source holds yet, holds their names for the source,
// and says why it leaves out the others.
func (n Names) Claim(policy string, ps []Policy) (kept []Policy, left []Left) {
	holder := "the label rules"
	if policy != "" {
		holder = fmt.Sprintf("ProtectionPolicy %q", policy)
	}
	for _, p := range ps {
		name := p.Policy.Name
		if why := n.refusal(policy, name); why != "" {
			left = append(left, Left{Policy: policy, Name: name, Why: why})
			continue
		}
		n[name] = holder
		kept = append(kept, p)
	}
	return kept, left
}

// refusal says why a source may not have a compiled policy of this name
// ("" when it may), and what compiles it.
func (n Names) refusal(policy, name string) string {
	const maxName = validation.DNS1123SubdomainMaxLength
	if len(name) > maxName {
		why := fmt.Sprintf("the compiled policy's name %q would be %d characters, more than the API server takes (%d)", name, len(name), maxName)
		if policy == "" {
			return why
		}
		// Every name of a policy's starts with the policy's name.
		if room := maxName - (len(name) - len(policy)); room > 0 {
			return why + fmt.Sprintf("; a policy name of at most %d characters compiles it", room)
		}
		return why + "; the CRD's name leaves no room for a policy name"
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Sprintf("the compiled policy's name %q is not one the API server takes: %s", name, strings.Join(msgs, "; "))
	}
	if holder, taken := n[name]; taken {
		why := fmt.Sprintf("%s already compiles to a policy named %q", holder, name)
		if policy != "" {
			why += "; rename one of the two ProtectionPolicies (names without dots never clash)"
		}
		return why
	}
	return ""
}
