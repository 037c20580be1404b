package traffic

import (
	"testing"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// names reads a service account's user name as the API server writes it,
// system:serviceaccount:NAMESPACE:NAME, and matches nothing near it.
func TestNamesServiceAccounts(t *testing.T) {
	s := v1alpha1.Subjects{ServiceAccounts: []v1alpha1.ServiceAccountRef{{Namespace: "ci", Name: "deployer"}}}
	for user, want := range map[string]bool{
		"system:serviceaccount:ci:deployer":   true,
		"system:serviceaccount:ci:deployer2":  false,
		"system:serviceaccount:cix:deployer":  false,
		"system:serviceaccount:ci":            false,
		"system:serviceaccount:ci:deployer:x": false,
		"ci:deployer":                         false,
		"deployer":                            false,
	} {
		if got := names(s, user, nil); got != want {
			t.Errorf("%q: %v, want %v", user, got, want)
		}
	}
	if !names(v1alpha1.Subjects{Groups: []string{"dev"}}, "alice", []string{"ops", "dev"}) || names(v1alpha1.Subjects{Users: []string{"alice"}}, "bob", []string{"alice"}) {
		t.Error("users match the user name and groups its groups")
	}
}
