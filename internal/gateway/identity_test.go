package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
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

	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
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
