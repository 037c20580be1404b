package protection

import (
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Names matches requesters by user, group or service account.
func Names(s v1alpha1.Subjects, u authenticationv1.UserInfo) bool {
	if slices.Contains(s.Users, u.Username) {
		return true
	}
	for _, g := range u.Groups {
		if slices.Contains(s.Groups, g) {
			return true
		}
	}
	for _, sa := range s.ServiceAccounts {
		if u.Username == "system:serviceaccount:"+sa.Namespace+":"+sa.Name {
			return true
		}
	}
	return false
}
