package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
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
		{attrs{Verb: "list", Resource: "configmaps"}, true},
		{attrs{Verb: "watch", Group: "apps", Resource: "deployments"}, true},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "rampart-validating"}, true},
		{attrs{Verb: "watch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "rampart-validating"}, true},
		{attrs{Verb: "get", Resource: "secrets", Namespace: ns, Name: "rampart-webhook-ca"}, true},
		// The compiled label rules (--compiled-policies): a
		// ValidatingAdmissionPolicy can only deny, as the webhook already can.
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies", Name: "deletion.rampart.io"}, true},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings", Name: "deletion.rampart.io"}, true},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies", Name: "anything"}, false},
		{attrs{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies", Name: "someone-elses"}, false},

		{attrs{Verb: "list", Resource: "secrets"}, false},
		{attrs{Verb: "watch", Resource: "secrets", Namespace: "default"}, false},
		{attrs{Verb: "list", Resource: "secrets", Namespace: ns}, false},
		{attrs{Verb: "get", Resource: "secrets", Namespace: "default", Name: "db-password"}, false},
		{attrs{Verb: "list", Group: "cert-manager.io", Resource: "certificates"}, false},
		{attrs{Verb: "get", Resource: "secrets", Namespace: ns, Name: "another-secret"}, false},
		{attrs{Verb: "update", Resource: "secrets", Namespace: ns, Name: "another-secret"}, false},
		{attrs{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, false},
		{attrs{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, false},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "rampart-mutating"}, false},
		// To label running pods for the node guard (explicitdeletion);
		// the ValidatingAdmissionPolicy rampart-manager-pod-writes holds
		// it to that label (TestManagerPodWritesTouchOneLabelOnly).
		{attrs{Verb: "patch", Resource: "pods", Namespace: "default", Name: "web-0"}, true},
		{attrs{Verb: "patch", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "someone-elses"}, false},
		{attrs{Verb: "delete", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "rampart-validating"}, false},
		{attrs{Verb: "list", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"}, false},
		{attrs{Verb: "list", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, false},
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

// grantCustomResources lets the local manager list and watch the custom
// resources of group, as the chart's manager.customResourceGroups does,
// and waits until the API server's authorizer says so: the manager checks
// its rights when the CRD appears.
func grantCustomResources(t *testing.T, env *clustertest.Env, group string) {
	t.Helper()
	ctx := context.Background()
	name := "rampart-manager-test-" + group
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{"*"}, Verbs: []string{"list", "watch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: localcluster.ManagerUser}}}
	for _, create := range []func() error{
		func() error {
			_, err := env.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	eventually(t, "the manager's right to list "+group, func(ctx context.Context) (bool, error) {
		sar, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: localcluster.ManagerUser,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "watch", Group: group, Resource: "anything"}},
		}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, err
	})
}

// The manager's right to patch pods is held by the policy
// rampart-manager-pod-writes to what it patches them for: adding
// rampart.io/explicit-deletion=true. As the manager, at once after the
// cluster is up: the label goes on; an image, another label or an
// annotation is refused with the policy's message; another user's
// same change passes.
func TestManagerPodWritesTouchOneLabelOnly(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: localcluster.ManagerUser, Groups: []string{"system:authenticated"}}
	asManager, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(c kubernetes.Interface, body string) error {
		_, err := c.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	if err := patch(asManager, `{"metadata":{"labels":{"rampart.io/explicit-deletion":"true"}}}`); err != nil {
		t.Fatalf("the manager adding rampart.io/explicit-deletion=true: %v", err)
	}
	for what, body := range map[string]string{
		"an image":          `{"spec":{"containers":[{"name":"c","image":"evil:1"}]}}`,
		"another label":     `{"metadata":{"labels":{"app":"other"}}}`,
		"an annotation":     `{"metadata":{"annotations":{"x":"y"}}}`,
		"the label's value": `{"metadata":{"labels":{"rampart.io/explicit-deletion":"no"}}}`,
	} {
		err := patch(asManager, body)
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || err == nil || !strings.Contains(err.Error(), "rampart-manager-pod-writes") {
			t.Errorf("the manager changing %s of a pod: %v, want refused by rampart-manager-pod-writes", what, err)
		}
	}
	if err := patch(env.Client, `{"metadata":{"labels":{"app":"other"}}}`); err != nil {
		t.Errorf("another user changing a label: %v, want it to pass", err)
	}
	// Taking the label back when the workload opts out.
	if err := patch(asManager, `{"metadata":{"labels":{"rampart.io/explicit-deletion":null}}}`); err != nil {
		t.Errorf("the manager removing rampart.io/explicit-deletion: %v", err)
	}
}
