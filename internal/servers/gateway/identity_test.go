package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/gateway"
)

// whoami asks the API server, through the gateway, who it thinks sent
// the request, with extra headers the client adds itself. It returns the
// user, or the HTTP status and message of a refusal.
func whoami(t *testing.T, cfg *rest.Config, headers map[string][]string) (user string, groups []string, code int, msg string) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, cfg.Host+"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		var st metav1.Status
		_ = json.Unmarshal(body, &st)
		return "", nil, resp.StatusCode, st.Message
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(body, &review); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return review.Status.UserInfo.Username, review.Status.UserInfo.Groups, resp.StatusCode, ""
}

// grant binds a ClusterRole with rules to user, removed when the test ends.
func grant(t *testing.T, env *clustertest.Env, name, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	rbac := env.Client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	// Each API server's authorizer learns of the grant from its own
	// informer; wait until every one of them allows each rule, or a test
	// that uses the grant at once can race it.
	for _, url := range env.APIServerURLs() {
		cfg := rest.CopyConfig(env.Config)
		cfg.Host = url
		cs := kubernetes.NewForConfigOrDie(cfg)
		for _, r := range rules {
			attrs := &authorizationv1.ResourceAttributes{Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}
			if len(r.ResourceNames) > 0 {
				attrs.Name = r.ResourceNames[0]
			}
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
					Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}, metav1.CreateOptions{})
				return err == nil && sar.Status.Allowed, nil
			})
			if err != nil {
				t.Fatalf("API server %s does not yet allow %s %+v after the grant: %v", url, user, attrs, err)
			}
		}
	}
}

// A user without rights gets no more through the gateway than directly:
// the API server authorizes the user the gateway authenticated, and
// identity headers the user sends are refused, whatever their spelling.
func TestLowPrivilegeUserCannotEscalateThroughGateway(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	eve := userConfig(t, env, "eve", "interns")

	user, groups, code, msg := whoami(t, eve, nil)
	if user != "eve" || !slices.Contains(groups, "interns") {
		t.Fatalf("eve through the gateway is %q %v (%d %s), want eve in interns", user, groups, code, msg)
	}
	_, err := clientFor(t, eve).CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "eve" cannot list resource "secrets"`) {
		t.Fatalf("eve listing secrets through the gateway: %v, want the API server's Forbidden for eve", err)
	}

	for name, headers := range map[string]map[string][]string{
		"Impersonate-User admin":       {"Impersonate-User": {"rampart-admin"}},
		"Impersonate-Group masters":    {"Impersonate-User": {"eve"}, "Impersonate-Group": {"system:masters"}},
		"X-Remote-User admin":          {"X-Remote-User": {"rampart-admin"}},
		"X-Remote-Group masters":       {"X-Remote-User": {"eve"}, "X-Remote-Group": {"system:masters"}},
		"Impersonate-Extra scopes":     {"Impersonate-User": {"eve"}, "Impersonate-Extra-Scopes": {"all"}},
		"lower-case impersonate-user":  {"impersonate-user": {"system:serviceaccount:kube-system:generic-garbage-collector"}},
		"Impersonate-Uid of the admin": {"Impersonate-User": {"eve"}, "Impersonate-Uid": {"0"}},
	} {
		user, _, code, msg := whoami(t, eve, headers)
		if code != http.StatusForbidden || !strings.Contains(msg, `"eve" cannot impersonate`) {
			t.Errorf("eve sending %s: user %q, %d %q; want 403 saying eve cannot impersonate", name, user, code, msg)
		}
	}
	// The same through client-go's own impersonation support.
	asAdmin := rest.CopyConfig(eve)
	asAdmin.Impersonate = rest.ImpersonationConfig{UserName: "rampart-admin", Groups: []string{"system:masters"}}
	_, err = clientFor(t, asAdmin).CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot impersonate") {
		t.Fatalf("eve impersonating the admin with client-go: %v, want Forbidden", err)
	}

	// A service account's token gets no more than the account has either.
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "intruder", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa := &rest.Config{Host: env.GatewayURL(), BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: env.PKIFile("ca.crt")}}
	if user, _, code, msg := whoami(t, sa, nil); user != "system:serviceaccount:"+ns+":intruder" {
		t.Fatalf("token through the gateway is %q (%d %s)", user, code, msg)
	}
	if _, _, code, msg := whoami(t, sa, map[string][]string{"X-Remote-User": {"rampart-admin"}, "X-Remote-Group": {"system:masters"}}); code != http.StatusForbidden {
		t.Errorf("service account sending X-Remote-*: %d %q, want 403", code, msg)
	}
}

// A user the API server lets impersonate may do so through the gateway,
// exactly as far as its rights go.
func TestUserAllowedToImpersonateCanThroughGateway(t *testing.T) {
	env := clustertest.Get(t)
	grant(t, env, "t-impersonate-bob", "support",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"bob"}, Verbs: []string{"impersonate"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{"viewers"}, Verbs: []string{"impersonate"}},
	)
	support := userConfig(t, env, "support")
	user, groups, code, msg := whoami(t, support, map[string][]string{"Impersonate-User": {"bob"}, "Impersonate-Group": {"viewers"}})
	if user != "bob" || !slices.Contains(groups, "viewers") {
		t.Fatalf("support impersonating bob in viewers: user %q %v, %d %q; want bob", user, groups, code, msg)
	}
	if user, _, _, _ := whoami(t, support, map[string][]string{"X-Remote-User": {"bob"}}); user != "bob" {
		t.Fatalf("support sending X-Remote-User bob: user %q, want bob (judged like Impersonate-User)", user)
	}
	if _, _, code, msg := whoami(t, support, map[string][]string{"Impersonate-User": {"bob"}, "Impersonate-Group": {"system:masters"}}); code != http.StatusForbidden || !strings.Contains(msg, `group "system:masters"`) {
		t.Fatalf("support impersonating bob in system:masters: %d %q, want 403 naming the group", code, msg)
	}
	if _, _, code, _ := whoami(t, support, map[string][]string{"Impersonate-User": {"alice"}}); code != http.StatusForbidden {
		t.Fatalf("support impersonating alice: %d, want 403", code)
	}
}

// The gateway's own identity cannot act as cluster-admin (issue 24): its
// role grants constrained impersonation only, under which the API server
// refuses system:masters, and nothing that writes beyond its own
// TrafficPolicy status. This fails as soon as a right widens: the legacy
// impersonate verb, a wildcard verb, or a write.
func TestGatewayIdentityCannotActAsClusterAdmin(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	sar := func(attrs authorizationv1.ResourceAttributes) bool {
		t.Helper()
		r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: gateway.RoleName, Groups: []string{"system:authenticated"}, ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, denied := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "groups", Name: "system:masters"},
		{Verb: "impersonate", Resource: "users", Name: "rampart-admin"},
		{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "kube-system", Name: "clusterrole-aggregation-controller"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: "scopes", Name: "all"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids", Name: "0"},
		{Verb: "*", Group: "*", Resource: "*"},
		{Verb: "get", Resource: "secrets", Namespace: "kube-system", Name: "any"},
		{Verb: "list", Resource: "secrets"},
		{Verb: "watch", Resource: "secrets", Namespace: "kube-system"},
		{Verb: "list", Group: "example.com", Resource: "widgets"},
		{Verb: "create", Resource: "pods", Namespace: "kube-system"},
		{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
		{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "cluster-admin"},
		{Verb: "delete", Resource: "namespaces", Name: "default"},
		{Verb: "create", Group: "certificates.k8s.io", Resource: "certificatesigningrequests"},
		{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "kube-system", Name: "default"},
	} {
		if sar(denied) {
			t.Errorf("the gateway's identity %s may %+v: its rights have widened (internal/servers/gateway/rbac.go)", gateway.RoleName, denied)
		}
	}
	// The rights it needs are there: the test sees the role.
	if !sar(authorizationv1.ResourceAttributes{Verb: "impersonate:user-info", Group: "authentication.k8s.io", Resource: "groups", Name: "dev"}) {
		t.Fatal("the gateway may not impersonate group dev: the role is not the one this test expects")
	}

	// With the gateway's own credentials, straight to the API server: it
	// can forward a user in any other group, never in system:masters.
	gw, err := clientcmd.BuildConfigFromFlags("", filepath.Join(env.Dir, "kubeconfigs", "rampart-gateway.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	as := func(groups ...string) (*authenticationv1.SelfSubjectReview, error) {
		cfg := rest.CopyConfig(gw)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: groups}
		return clientFor(t, cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	if r, err := as("dev"); err != nil || r.Status.UserInfo.Username != "mallory" {
		t.Fatalf("the gateway's credentials impersonating mallory in dev: %+v, %v; want mallory", r, err)
	}
	if r, err := as("dev", "system:masters"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:masters") {
		t.Fatalf("the gateway's credentials impersonating mallory in system:masters: %+v, %v; want the API server's Forbidden", r, err)
	}
	cfg := rest.CopyConfig(gw)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: []string{"system:masters"}}
	if _, err := clientFor(t, cfg).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the gateway's credentials listing Secrets as system:masters: %v, want Forbidden", err)
	}

	// Through the gateway, a member of system:masters is told to go to
	// the API server directly.
	user, _, code, msg := whoami(t, userConfig(t, env, "root", "system:masters"), nil)
	if code != http.StatusForbidden || !strings.Contains(msg, "system:masters are not forwarded") || !strings.Contains(msg, "to the API server directly") {
		t.Fatalf("a member of system:masters through the gateway: user %q, %d %q; want 403 saying to use the API server directly", user, code, msg)
	}
}
