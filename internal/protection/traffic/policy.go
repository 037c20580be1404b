package traffic

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Policy is a TrafficPolicy ready to match requests.
type Policy struct {
	Name string
	// Generation tells limiter state of an edited policy from the old one.
	Generation int64
	Spec       v1alpha1.TrafficPolicySpec
}

// Sort orders policies as the gateway consults them: by precedence, then
// by name so that equal precedences are decided the same way every time.
func Sort(ps []Policy) {
	slices.SortFunc(ps, func(a, b Policy) int {
		return cmp.Or(cmp.Compare(a.Spec.Precedence, b.Spec.Precedence), strings.Compare(a.Name, b.Name))
	})
}

// Select returns the first policy of sorted that matches r, or nil.
func Select(sorted []Policy, r Request) *Policy {
	for i := range sorted {
		if sorted[i].Matches(r) {
			return &sorted[i]
		}
	}
	return nil
}

// Matches says whether any match clause and no except clause selects r.
func (p *Policy) Matches(r Request) bool {
	return anyClause(p.Spec.Match, r) && !anyClause(p.Spec.Except, r)
}

func anyClause(cs []v1alpha1.TrafficMatch, r Request) bool {
	for _, c := range cs {
		if clauseMatches(c, r) {
			return true
		}
	}
	return false
}

func clauseMatches(c v1alpha1.TrafficMatch, r Request) bool {
	subjects := len(c.Users)+len(c.Groups)+len(c.ServiceAccounts) > 0
	if subjects && !names(c.Subjects, r.User, r.Groups) {
		return false
	}
	// A clause on the impersonated user alone never matches (the API
	// refuses one too): it would let a client leave its own policy.
	if c.Impersonated != nil && (!subjects || r.Impersonated == nil || !names(*c.Impersonated, r.Impersonated.Username, r.Impersonated.Groups)) {
		return false
	}
	if len(c.UserAgents) > 0 && !slices.ContainsFunc(c.UserAgents, func(p string) bool { return Glob(p, r.UserAgent) }) {
		return false
	}
	if len(c.Verbs) > 0 && !slices.Contains(c.Verbs, "*") && !slices.Contains(c.Verbs, r.Verb) {
		return false
	}
	if len(c.NonResourceURLs) > 0 {
		return !r.IsResource && slices.ContainsFunc(c.NonResourceURLs, func(p string) bool { return nonResourceMatches(p, r.Path) })
	}
	if len(c.Resources) > 0 || len(c.Namespaces) > 0 {
		if !r.IsResource {
			return false
		}
	}
	if len(c.Resources) > 0 && !slices.ContainsFunc(c.Resources, func(rr v1alpha1.TrafficResourceRule) bool { return resourceMatches(rr, r) }) {
		return false
	}
	if len(c.Namespaces) > 0 && (r.Namespace == "" || !slices.Contains(c.Namespaces, "*") && !slices.Contains(c.Namespaces, r.Namespace)) {
		return false
	}
	return true
}

// names says whether s names the user, one of its groups, or the service
// account it is. It is the admission side's subject match, written here so
// that the gateway's decisions depend on the API types alone; it builds no
// string, as it runs for every clause of every request.
func names(s v1alpha1.Subjects, user string, groups []string) bool {
	if slices.Contains(s.Users, user) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(s.Groups, g) {
			return true
		}
	}
	if len(s.ServiceAccounts) == 0 {
		return false
	}
	sa, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return false
	}
	ns, name, ok := strings.Cut(sa, ":")
	if !ok {
		return false
	}
	for _, ref := range s.ServiceAccounts {
		if ref.Namespace == ns && ref.Name == name {
			return true
		}
	}
	return false
}

func resourceMatches(rr v1alpha1.TrafficResourceRule, r Request) bool {
	if !slices.Contains(rr.APIGroups, "*") && !slices.Contains(rr.APIGroups, r.APIGroup) {
		return false
	}
	for _, name := range rr.Resources {
		res, sub, hasSub := strings.Cut(name, "/")
		if res != "*" && res != r.Resource {
			continue
		}
		if !hasSub && (r.Subresource == "" || name == "*") {
			return true
		}
		if hasSub && r.Subresource != "" && (sub == "*" || sub == r.Subresource) {
			return true
		}
	}
	return false
}

func nonResourceMatches(pattern, path string) bool {
	if pattern == "*" {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(path, prefix)
	}
	return pattern == path
}

// Glob matches s against pattern, where * matches any run of characters
// (slashes included: user agents contain them) and nothing else is
// special.
func Glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return strings.HasSuffix(s, last)
}
