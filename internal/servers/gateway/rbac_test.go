package gateway

import (
	"slices"
	"strings"
	"testing"
)

// The gateway's role lets it read no Secret: no wildcard resource with
// list or watch in a group that has Secrets (the core group, or "*"),
// and no secrets by name.
func TestGatewayRoleCannotReadSecrets(t *testing.T) {
	for _, r := range ClusterRole().Rules {
		reads := slices.Contains(r.Verbs, "list") || slices.Contains(r.Verbs, "watch") || slices.Contains(r.Verbs, "get") || slices.Contains(r.Verbs, "*")
		if !reads {
			continue
		}
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") && (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) {
			t.Errorf("rule %+v lets the gateway read Secrets", r)
		}
		if slices.Contains(r.APIGroups, "*") {
			t.Errorf("rule %+v reads every API group, custom ones included: name them", r)
		}
	}
	if slices.Contains(CountedGroups, "") || slices.Contains(CountedGroups, "*") {
		t.Errorf("CountedGroups %v holds the core group or *", CountedGroups)
	}
}

func TestCustomResourceGroupsRefuseSecretsGroups(t *testing.T) {
	for _, bad := range [][]string{{"*"}, {"example.com", ""}} {
		err := CheckCountGroups(bad)
		if err == nil || !strings.Contains(err.Error(), "Secret") {
			t.Errorf("CheckCountGroups(%q) = %v, want an error that names Secrets", bad, err)
		}
	}
	if err := CheckCountGroups([]string{"cert-manager.io"}); err != nil {
		t.Errorf("CheckCountGroups(cert-manager.io) = %v", err)
	}
	if got := CustomResourceRole([]string{"cert-manager.io"}).Rules; len(got) != 1 || !slices.Equal(got[0].APIGroups, []string{"cert-manager.io"}) || !slices.Equal(got[0].Verbs, []string{"list", "watch"}) {
		t.Errorf("CustomResourceRole(cert-manager.io) rules = %+v", got)
	}
}
