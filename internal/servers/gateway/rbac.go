package gateway

import (
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
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
		// metadata of the resources LISTed under a guard. RBAC cannot
		// leave Secrets out of a wildcard, and list on a resource reads
		// its objects whole: the core group is named resource by
		// resource, the built-in groups by name, custom resources only
		// in the groups CustomResourceRole grants.
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: CountedCoreResources, Verbs: []string{"list", "watch"}},
		rbacv1.PolicyRule{APIGroups: CountedGroups, Resources: []string{"*"}, Verbs: []string{"list", "watch"}},
		// Each replica writes its own entry of status.breakers.
		rbacv1.PolicyRule{APIGroups: []string{"rampart.io"}, Resources: []string{"trafficpolicies/status"}, Verbs: []string{"patch"}},
	)
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName},
		Rules:      rules,
	}
}

// CountedCoreResources are the core resources the gateway may list and
// watch to count them: all that kube-apiserver 1.36 serves with list and
// watch but Secrets, which the gateway must not be able to read.
var CountedCoreResources = []string{
	"configmaps", "endpoints", "events", "limitranges", "namespaces", "nodes",
	"persistentvolumeclaims", "persistentvolumes", "pods", "podtemplates",
	"replicationcontrollers", "resourcequotas", "serviceaccounts", "services",
}

// CountedGroups are the API groups kube-apiserver 1.36 serves (with its
// aggregator and apiextensions) that have resources to list, and
// Rampart's own: none holds Secrets. authentication.k8s.io and
// authorization.k8s.io only take reviews.
var CountedGroups = []string{
	"admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
	"apps", "autoscaling", "batch", "certificates.k8s.io", "coordination.k8s.io",
	"discovery.k8s.io", "events.k8s.io", "flowcontrol.apiserver.k8s.io",
	"internal.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io", "policy",
	"rampart.io", "rbac.authorization.k8s.io", "resource.k8s.io", "scheduling.k8s.io",
	"storage.k8s.io", "storagemigration.k8s.io",
}

// CustomResourceRoleName names the ClusterRole that lets the gateway count
// the custom resources of the groups an operator lists (the chart's
// gateway.countCustomResourceGroups, `rampart gateway
// --count-custom-resource-groups`).
const CustomResourceRoleName = "rampart-gateway-custom-resources"

// CustomResourceRole lets the gateway list and watch every resource of
// groups, after CheckCountGroups; nil for none.
func CustomResourceRole(groups []string) *rbacv1.ClusterRole {
	if len(groups) == 0 {
		return nil
	}
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: CustomResourceRoleName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: groups, Resources: []string{"*"}, Verbs: []string{"list", "watch"}}},
	}
}

// CheckCountGroups refuses custom-resource groups that would grant the
// gateway Secrets: "*" (every group) and "" (the core group).
func CheckCountGroups(groups []string) error {
	for _, g := range groups {
		switch g {
		case "*":
			return fmt.Errorf("custom-resource group %q would let the gateway read every Secret: name the groups whose resources you LIST under a guard, e.g. cert-manager.io", g)
		case "":
			return fmt.Errorf("custom-resource group \"\" is the core group, where Secrets are: the gateway counts its resources but Secrets without it")
		}
	}
	return nil
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

// SpaceRoleName names the Role, in Rampart's namespace, that lets the
// gateway read the manager's look at etcd's space for its brake.
const SpaceRoleName = "rampart-gateway-etcd-space"

// SpaceRole lets the gateway get, list and watch the one ConfigMap the
// manager publishes etcd's space in (its watch names it with a
// fieldSelector, which RBAC accepts for resourceNames), and nothing else
// in Rampart's namespace.
func SpaceRole(namespace string) *rbacv1.Role {
	return &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: SpaceRoleName, Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{space.ReportConfigMap}, Verbs: []string{"get", "list", "watch"}}},
	}
}

// SpaceRoleBinding binds SpaceRole to the gateway's user.
func SpaceRoleBinding(namespace, user string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: SpaceRoleName, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: SpaceRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
}

// ClusterRoleBinding binds ClusterRole to the gateway's user (the CN of
// its client certificate).
func ClusterRoleBinding(user string) *rbacv1.ClusterRoleBinding {
	return roleBinding(RoleName, user)
}

// CustomResourceRoleBinding binds CustomResourceRole to the gateway's user.
func CustomResourceRoleBinding(user string) *rbacv1.ClusterRoleBinding {
	return roleBinding(CustomResourceRoleName, user)
}

func roleBinding(role, user string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
}
