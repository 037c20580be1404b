package protection

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func TestNames(t *testing.T) {
	s := v1alpha1.Subjects{
		Users:           []string{"alice"},
		Groups:          []string{"sre"},
		ServiceAccounts: []v1alpha1.ServiceAccountRef{{Namespace: "kube-system", Name: "horizontal-pod-autoscaler"}},
	}
	for _, tt := range []struct {
		user authenticationv1.UserInfo
		want bool
	}{
		{authenticationv1.UserInfo{Username: "alice"}, true},
		{authenticationv1.UserInfo{Username: "bob", Groups: []string{"dev", "sre"}}, true},
		{authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:horizontal-pod-autoscaler"}, true},
		{authenticationv1.UserInfo{Username: "system:serviceaccount:default:horizontal-pod-autoscaler"}, false},
		{authenticationv1.UserInfo{Username: "bob", Groups: []string{"dev"}}, false},
		{authenticationv1.UserInfo{Username: "Alice"}, false},
	} {
		if got := Names(s, tt.user); got != tt.want {
			t.Errorf("Names(%+v) = %v, want %v", tt.user, got, tt.want)
		}
	}
}
