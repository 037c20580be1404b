package gateway

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RoleName names the gateway's ClusterRole and its bindings.
const RoleName = "rampart-gateway"

// ClusterRole is what the gateway's own identity needs: impersonate the
// identities it forwards (package comment), review tokens and
// impersonation rights, watch TrafficPolicies and report their breakers,
// and count objects for the LIST guard. It is written here, not
// generated from markers into the manager's role: the manager must not
// be able to impersonate.
//
// Impersonation is constrained (KEP-5284, beta and on by default in
// Kubernetes 1.36), never the legacy verb impersonate: under
// constrained impersonation the API server refuses to impersonate group
// system:masters whatever the impersonator's rights, so the gateway's
// credentials cannot act as it. The user-info mode forwards users with
// their groups, UID and extras; the serviceaccount and arbitrary-node
// modes forward service accounts and nodes by name (identity.Forward).
// Each mode needs impersonate-on:MODE:VERB for the verb of the request
// forwarded.
func ClusterRole() *rbacv1.ClusterRole {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"users", "groups", "uids", "userextras"}, Verbs: []string{"impersonate:user-info"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate:serviceaccount"}},
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"nodes"}, Verbs: []string{"impersonate:arbitrary-node"}},
	}
	for _, mode := range impersonationModes {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: impersonateOn(mode, resourceVerbs)},
			rbacv1.PolicyRule{NonResourceURLs: []string{"*"}, Verbs: impersonateOn(mode, nonResourceVerbs)},
		)
	}
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{"rampart.io"}, Resources: []string{"trafficpolicies"}, Verbs: []string{"get", "list", "watch"}},
		// The LIST guard counts objects: cluster-wide from the API
		// server's own metrics, per namespace by watching the
		// metadata of the resources LISTed under a guard (any
		// resource).
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"list", "watch"}},
		// Each replica writes its own entry of status.breakers.
		rbacv1.PolicyRule{APIGroups: []string{"rampart.io"}, Resources: []string{"trafficpolicies/status"}, Verbs: []string{"patch"}},
	)
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName},
		Rules:      rules,
	}
}

// impersonationModes are the constrained impersonation modes the gateway
// forwards with.
var impersonationModes = []string{"user-info", "serviceaccount", "arbitrary-node"}

// resourceVerbs are the verbs kube-apiserver's RequestInfoFactory gives
// resource requests; nonResourceVerbs are the lower-cased HTTP methods it
// gives the others.
var (
	resourceVerbs    = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "proxy"}
	nonResourceVerbs = []string{"get", "head", "options", "post", "put", "patch", "delete"}
)

func impersonateOn(mode string, verbs []string) []string {
	out := make([]string, len(verbs))
	for i, v := range verbs {
		out[i] = "impersonate-on:" + mode + ":" + v
	}
	return out
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
