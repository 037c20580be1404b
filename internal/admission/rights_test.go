package admission_test

import (
	"context"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/internal/localcluster"
	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
)

// TestManagerRightsStayNarrow asks the API server what the manager, with
// the rights the chart and `rampart up` give it (charts/rampart/files/rbac),
// may do. It fails when a right widens: reading Secrets other than its CA,
// creating or changing webhook configurations other than its own, acting
// as someone else, or granting rights.
func TestManagerRightsStayNarrow(t *testing.T) {
	env := clustertest.Get(t)
	ns := localcluster.ManagerNamespace
	type attrs = authorizationv1.ResourceAttributes
	for _, tt := range []struct {
		attrs   attrs
		allowed bool
	}{
		// What it needs, so that a denial below means something.
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "rampart-validating"}, true},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "rampart-mutating"}, true},
		{attrs{Verb: "watch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "rampart-validating"}, true},
		{attrs{Verb: "get", Resource: "secrets", Namespace: ns, Name: "rampart-webhook-ca"}, true},

		{attrs{Verb: "get", Resource: "secrets", Namespace: "default", Name: "db-password"}, false},
		{attrs{Verb: "get", Resource: "secrets", Namespace: ns, Name: "another-secret"}, false},
		{attrs{Verb: "update", Resource: "secrets", Namespace: ns, Name: "another-secret"}, false},
		{attrs{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, false},
		{attrs{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, false},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "someone-elses"}, false},
		{attrs{Verb: "delete", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "rampart-validating"}, false},
		{attrs{Verb: "impersonate", Resource: "users", Name: "admin"}, false},
		{attrs{Verb: "impersonate", Resource: "groups", Name: "system:masters"}, false},
		{attrs{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "kube-system", Name: "default"}, false},
		{attrs{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "rampart-manager"}, false},
		{attrs{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "cluster-admin"}, false},
		{attrs{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}, false},
		{attrs{Verb: "create", Resource: "pods", Namespace: "default"}, false},
		{attrs{Verb: "delete", Resource: "pods", Namespace: "default", Name: "web"}, false},
		{attrs{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "kube-system", Name: "default"}, false},
		{attrs{Verb: "delete", Group: "apps", Resource: "deployments", Namespace: "default", Name: "web"}, false},
	} {
		a := tt.attrs
		name := fmt.Sprintf("%s %s/%s %s/%s", a.Verb, a.Group, a.Resource, a.Namespace, a.Name)
		t.Run(name, func(t *testing.T) {
			sar, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User: localcluster.ManagerUser, Groups: []string{"system:authenticated"}, ResourceAttributes: &a},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != tt.allowed {
				t.Errorf("the manager may %s: %v, want %v (%s)", name, sar.Status.Allowed, tt.allowed, sar.Status.Reason)
			}
		})
	}
}
