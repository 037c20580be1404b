package gateway

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RoleName names the gateway's ClusterRole and its bindings.
const RoleName = "rampart-gateway"

// ClusterRole is what the gateway's own identity needs: impersonate every
// kind of identity it forwards (package comment), review tokens and
// impersonation rights, watch TrafficPolicies and report their breakers,
// and count objects for the LIST guard. It is written here, not
// generated from markers into the manager's role: the manager must not
// be able to impersonate.
func ClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName},
		Rules: []rbacv1.PolicyRule{
			// Users, groups and service accounts are checked in the core
			// group; UIDs and extras (userextras/KEY) in
			// authentication.k8s.io, where "*" is the only way RBAC
			// matches every extra key.
			{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"rampart.io"}, Resources: []string{"trafficpolicies"}, Verbs: []string{"get", "list", "watch"}},
			// The LIST guard counts objects: cluster-wide from the API
			// server's own metrics, per namespace by watching the
			// metadata of the resources LISTed under a guard (any
			// resource; the impersonation above already reaches further).
			{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"list", "watch"}},
			// Each replica writes its own entry of status.breakers.
			{APIGroups: []string{"rampart.io"}, Resources: []string{"trafficpolicies/status"}, Verbs: []string{"patch"}},
		},
	}
}

// ClusterRoleBinding binds ClusterRole to the gateway's user (the CN of
// its client certificate).
func ClusterRoleBinding(user string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
}
