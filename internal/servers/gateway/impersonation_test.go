package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// TrafficPolicies match the client the gateway authenticated, not the
// user it impersonates: a policy naming a user does not hold a client
// that impersonates that user, and a client cannot escape its own policy
// by impersonating someone else (as docs/gateway.md says).
func TestPoliciesMatchTheAuthenticatedClientNotTheImpersonatedUser(t *testing.T) {
	env := clustertest.Get(t)
	grant(t, env, "t-imp-support", "imp-support",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"imp-alice", "imp-bob"}, Verbs: []string{"impersonate"}})
	applyPolicy(t, env, "t-imp-alice", `{precedence: 30, action: Reject, rejectMessage: "alice is refused", match: [{users: [imp-alice]}]}`)
	applyPolicy(t, env, "t-imp-support", `{precedence: 31, action: Reject, rejectMessage: "support is refused", match: [{users: [imp-support]}]}`)
	alice := httpClient(t, userConfig(t, env, "imp-alice"))
	url := env.GatewayURL() + "/version"
	var a answer
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		a = get(t, alice, url)
		return a.code == http.StatusForbidden, nil
	}); err != nil {
		t.Fatalf("imp-alice not refused by t-imp-alice: %+v", a)
	}
	impersonating := func(user string) answer {
		t.Helper()
		cfg := userConfig(t, env, "imp-support")
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return get(t, httpClient(t, cfg), url)
	}
	// imp-support's own policy holds whoever it impersonates.
	for _, user := range []string{"imp-alice", "imp-bob"} {
		if a := impersonating(user); a.code != http.StatusForbidden || !strings.Contains(a.message, "support is refused") {
			t.Errorf("imp-support impersonating %s: %+v, want t-imp-support's refusal", user, a)
		}
	}
	// Without a policy of its own, imp-support impersonating imp-alice is
	// not held by imp-alice's policy.
	applyPolicy(t, env, "t-imp-support", `{precedence: 31, action: Reject, match: [{users: [someone-else]}]}`)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		a = impersonating("imp-alice")
		return a.code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("imp-support impersonating imp-alice: %+v, want 200 (t-imp-alice names the impersonated user, not the client)", a)
	}
}

// A platform API that acts for its users can be limited by whom it
// impersonates (match[].impersonated), only by a policy that also names
// it: a clause on the impersonated user alone is refused by the API, and
// a policy naming another client's impersonation does not reach it.
func TestImpersonatedClauseNarrowsThePolicyOfTheNamedClient(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	u := trafficPolicy(t, "t-imp-alone", `{precedence: 1, action: Exempt, match: [{impersonated: {users: [imp-carol]}}]}`)
	if _, err := env.Dynamic.Resource(gateway.TrafficPolicies).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil ||
		!strings.Contains(err.Error(), "must also name the clients that impersonate") {
		t.Errorf("a clause on the impersonated user alone: %v, want refused", err)
	}
	grant(t, env, "t-imp-platform", "imp-platform",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"imp-carol"}, Verbs: []string{"impersonate"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{"imp-team-a"}, Verbs: []string{"impersonate"}})
	applyPolicy(t, env, "t-imp-platform-team-a", `{precedence: 32, action: Reject, rejectMessage: "team-a through the platform", match: [{users: [imp-platform], impersonated: {groups: [imp-team-a]}}]}`)
	applyPolicy(t, env, "t-imp-other-for-carol", `{precedence: 33, action: Exempt, match: [{users: [imp-other], impersonated: {users: [imp-carol]}}]}`)
	applyPolicy(t, env, "t-imp-platform", `{precedence: 34, action: Reject, rejectMessage: "the platform is refused", match: [{users: [imp-platform]}]}`)
	url := env.GatewayURL() + "/version"
	as := func(imp rest.ImpersonationConfig) answer {
		t.Helper()
		cfg := userConfig(t, env, "imp-platform")
		cfg.Impersonate = imp
		return get(t, httpClient(t, cfg), url)
	}
	var a answer
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		a = as(rest.ImpersonationConfig{UserName: "imp-carol", Groups: []string{"imp-team-a"}})
		return a.code == http.StatusForbidden && strings.Contains(a.message, "team-a through the platform"), nil
	}); err != nil {
		t.Fatalf("imp-platform impersonating imp-carol in imp-team-a: %+v, want t-imp-platform-team-a's refusal", a)
	}
	for name, imp := range map[string]rest.ImpersonationConfig{
		"impersonating imp-carol (the Exempt policy names another client)": {UserName: "imp-carol"},
		"for itself": {},
	} {
		if a := as(imp); a.code != http.StatusForbidden || !strings.Contains(a.message, "the platform is refused") {
			t.Errorf("imp-platform %s: %+v, want its own policy's refusal", name, a)
		}
	}
}
