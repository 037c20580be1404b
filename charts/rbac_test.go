package charts_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// grant is a right the manager may hold, and why it needs it.
type grant struct {
	groups, resources, verbs, names []string
	why                             string
}

// managerGrants are every right the manager may hold. A rule in the
// generated role.yaml that any of them does not cover fails
// TestManagerRoleGrantsOnlyWhatItNeeds: widen this list only with a reason.
var managerGrants = []grant{
	{[]string{""}, []string{"configmaps", "endpoints", "events", "limitranges", "namespaces", "persistentvolumeclaims", "pods", "podtemplates", "replicationcontrollers", "resourcequotas", "serviceaccounts", "services"}, []string{"list", "watch"}, nil,
		"cluster view (internal/protection/clusterview): labelled objects, pods, claims and workloads; every core resource but Secrets, by name, since a wildcard would take Secrets too"},
	{[]string{"apps", "batch", "autoscaling", "policy", "networking.k8s.io", "discovery.k8s.io", "storage.k8s.io", "coordination.k8s.io", "events.k8s.io", "rbac.authorization.k8s.io", "resource.k8s.io", "apiextensions.k8s.io"}, []string{"*"}, []string{"list", "watch"}, nil,
		"cluster view: labelled objects of built-in groups (none holds Secrets), workloads, CRDs; custom resources only in the groups the chart's customResourceGroups names"},
	{[]string{""}, []string{"nodes"}, []string{"list", "watch"}, nil, "budgets and flow controls read nodes' health: a pod on a NotReady node is already unavailable (the node lifecycle controller's deletes go through), many at once are a partition"},
	{[]string{"*"}, []string{"*/scale"}, []string{"get"}, nil, "explicit replicas and budgets read any workload's scale"},
	{[]string{""}, []string{"pods"}, []string{"get"}, nil, "the budget webhook reads a pod being evicted that the cluster view has not cached yet"},
	{[]string{""}, []string{"pods"}, []string{"patch"}, nil, "labels the running pods of workloads that opt in rampart.io/explicit-deletion=true (internal/servers/manager/controller/explicitdeletion)"},
	{[]string{"apps"}, []string{"deployments", "statefulsets"}, []string{"get"}, nil, "generated budgets read their workload"},
	{[]string{"", "events.k8s.io"}, []string{"events"}, []string{"create", "patch"}, nil, "denials and overrides are recorded as Events"},
	{[]string{"admissionregistration.k8s.io"}, []string{"validatingwebhookconfigurations"}, []string{"get", "update", "patch"}, []string{"rampart-validating"}, "fills in its own webhook configuration, which the chart creates"},
	{[]string{"admissionregistration.k8s.io"}, []string{"validatingwebhookconfigurations"}, []string{"list", "watch"}, []string{"rampart-validating"}, "watches its own webhook configuration by name"},
	{[]string{"admissionregistration.k8s.io"}, []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, []string{"get", "list", "create", "patch", "delete"}, nil,
		"keeps the compiled label rules applied (--compiled-policies) and removes its stale ones; create and list cannot be narrowed by name, and its own webhook configuration already lets it refuse any request"},
	{[]string{"rbac.authorization.k8s.io"}, []string{"clusterroles"}, []string{"get"}, []string{"rampart-manager"}, "its ClusterRole owns the webhook configurations, so they go when it goes"},
	{[]string{"authentication.k8s.io"}, []string{"tokenreviews"}, []string{"create"}, nil, "authenticates metrics scrapers"},
	{[]string{"authorization.k8s.io"}, []string{"subjectaccessreviews"}, []string{"create"}, nil, "authorizes metrics scrapers"},
	{[]string{"rampart.io"}, []string{"*"}, []string{"get", "list", "watch"}, nil, "Rampart's own policies"},
	{[]string{"rampart.io"}, []string{"*/status"}, []string{"get", "update", "patch"}, nil, "status of Rampart's own policies"},
	{[]string{"rampart.io"}, []string{"podunavailablebudgets"}, []string{"create", "update", "patch", "delete"}, nil, "generated budgets; in its own namespace the budget fence rampart-fence (created once, an annotation patched per fenced disruption) and the change marks rampart-changes.NAMESPACE (an annotation patched per budget created or changed)"},
}

// ownNamespaceGrants are the rights of the Role in Rampart's own namespace.
var ownNamespaceGrants = []grant{
	{[]string{""}, []string{"secrets"}, []string{"create"}, nil, "creates the webhook CA Secret once (a Role in its namespace only)"},
	{[]string{""}, []string{"secrets"}, []string{"get", "update"}, []string{"rampart-webhook-ca"}, "rotates the webhook CA"},
	{[]string{""}, []string{"configmaps"}, []string{"create"}, nil, "the barrier's dry-run probes (never stored) show that every API server has loaded the webhook configuration (a Role in its namespace only)"},
	{[]string{""}, []string{"configmaps"}, []string{"get", "update"}, []string{"rampart-quota-peaks"}, "keeps the namespaces' peak use for rampart quota plan (created with the create right above)"},
	{[]string{""}, []string{"configmaps"}, []string{"get", "update"}, []string{"rampart-recycle-bin"}, "publishes the recycle bin's summary for rampart status (created with the create right above)"},
	{[]string{""}, []string{"configmaps"}, []string{"get", "update"}, []string{"rampart-etcd-space"}, "publishes its look at etcd's space for rampart status (created with the create right above)"},
	{[]string{"coordination.k8s.io"}, []string{"leases"}, []string{"get", "list", "watch", "create", "update", "patch", "delete"}, nil, "leader election (a Role in its namespace only)"},
}

// covers says whether g grants verb on group/resource (limited to name
// when name is not empty). A grant with names covers only a right limited
// to one of them.
func (g grant) covers(group, resource, verb, name string) bool {
	if len(g.names) > 0 && !slices.Contains(g.names, name) {
		return false
	}
	return slices.Contains(g.groups, group) && slices.Contains(g.resources, resource) && slices.Contains(g.verbs, verb)
}

// tuples are the single rights a rule grants; a rule without resource
// names grants each right on every name ("").
func tuples(r rbacv1.PolicyRule) [][4]string {
	names := r.ResourceNames
	if len(names) == 0 {
		names = []string{""}
	}
	var out [][4]string
	for _, g := range r.APIGroups {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				for _, n := range names {
					out = append(out, [4]string{g, res, v, n})
				}
			}
		}
	}
	return out
}

func TestManagerRoleGrantsOnlyWhatItNeeds(t *testing.T) {
	data, err := os.ReadFile("rampart/files/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	roles := 0
	for {
		var role rbacv1.ClusterRole // a Role has the same rules
		if err := dec.Decode(&role); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(role.Rules) == 0 {
			continue
		}
		roles++
		if role.Kind == "Role" && role.Namespace != "rampart-system" {
			t.Errorf("Role %s is in namespace %q, want rampart-system (the chart moves it to its release namespace)", role.Name, role.Namespace)
		}
		for _, r := range role.Rules {
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s %s grants non-resource URLs %v", role.Kind, role.Name, r.NonResourceURLs)
			}
			for _, tu := range tuples(r) {
				// Secrets, leases and probes are granted only by the Role
				// in Rampart's own namespace.
				grants := managerGrants
				if role.Kind == "Role" {
					grants = ownNamespaceGrants
				}
				ok := slices.ContainsFunc(grants, func(g grant) bool { return g.covers(tu[0], tu[1], tu[2], tu[3]) })
				if !ok {
					t.Errorf("%s %s grants %s on %q/%s (name %q), which no entry of managerGrants (ownNamespaceGrants for the Role) covers: narrow the +kubebuilder:rbac marker, or add the right there with the reason it is needed",
						role.Kind, role.Name, tu[2], tu[0], tu[1], tu[3])
				}
			}
		}
	}
	if roles != 2 {
		t.Errorf("role.yaml has %d roles with rules, want the ClusterRole and the Role", roles)
	}
}
