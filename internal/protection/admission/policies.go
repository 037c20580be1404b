package admission

import (
	"context"
	"net/http"
	"strings"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// PolicyKind is the kind whose objects are ProtectionPolicies: the scale
// protection reads them too.
const PolicyKind = "ProtectionPolicy"

// RelabelledWidening is the widening set of namespaces just relabelled
// into a policy's namespaceSelector (Widening{Object: the policy, Key: the
// namespace}): the replicas handler brings them; the policy's and the
// scale protection's webhooks reach them by name for a while. The API
// server matches a webhook's namespaceSelector against its own cache of
// namespaces, which may lag the relabel, and a namespace's name never
// changes.
const RelabelledWidening = "relabelled"

// PolicyOwner is the owner of a ProtectionPolicy's webhooks.
func PolicyOwner(name string) Owner { return Owner{Kind: PolicyKind, Name: name} }

// Policies reads ProtectionPolicies, from the manager's cache.
type Policies interface {
	// Policy returns the named policy; ok is false if there is none.
	Policy(ctx context.Context, name string) (p *v1alpha1.ProtectionPolicy, ok bool, err error)
	// List returns every policy.
	List(ctx context.Context) ([]v1alpha1.ProtectionPolicy, error)
}

// PolicyList is a fixed set of ProtectionPolicies read as Policies, for
// handlers run outside the manager and its cache (the tests that hold the
// webhooks' answers against the compiled policies').
type PolicyList []v1alpha1.ProtectionPolicy

// Policy implements Policies.
func (ps PolicyList) Policy(_ context.Context, name string) (*v1alpha1.ProtectionPolicy, bool, error) {
	for i := range ps {
		if ps[i].Name == name {
			return &ps[i], true, nil
		}
	}
	return nil, false, nil
}

// List implements Policies.
func (ps PolicyList) List(context.Context) ([]v1alpha1.ProtectionPolicy, error) { return ps, nil }

type policyKey struct{}

// PolicyFromPath is a webhook.Admission WithContextFunc: it passes the
// policy named by the request path (after prefix) to the handler.
func PolicyFromPath(prefix string) func(context.Context, *http.Request) context.Context {
	return func(ctx context.Context, r *http.Request) context.Context {
		if name, ok := strings.CutPrefix(r.URL.Path, prefix); ok && name != "" {
			return WithName(ctx, name)
		}
		return ctx
	}
}

// WithName passes the object (a policy, a flow control) whose webhook a
// request came through to its handler.
func WithName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, policyKey{}, name)
}

// NameFrom is the object a request is judged for, if it came through the
// webhook of one (PolicyFromPath, WithName).
func NameFrom(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(policyKey{}).(string)
	return name, ok
}
