package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
)

// TrafficPolicies match the client the gateway authenticated, not the
// user it impersonates: a policy naming a user does not hold a client
// that impersonates that user, and a client cannot escape its own policy
// by impersonating someone else (as the README says).
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
