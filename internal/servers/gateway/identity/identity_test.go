package identity

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestRequested(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers http.Header
		want    *Impersonation
		err     bool
	}{
		{"nothing", http.Header{"Accept": {"application/json"}}, nil, false},
		{"user and groups", http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"a", "b"}}, &Impersonation{User: "bob", Groups: []string{"a", "b"}}, false},
		{"front-proxy headers mean the same", http.Header{"X-Remote-User": {"bob"}, "X-Remote-Group": {"a"}, "X-Remote-Extra-Scopes": {"view"}},
			&Impersonation{User: "bob", Groups: []string{"a"}, Extra: map[string][]string{"scopes": {"view"}}}, false},
		{"escaped extra key", http.Header{"Impersonate-User": {"bob"}, "Impersonate-Extra-Example.com%2fteam": {"x"}, "Impersonate-Uid": {"42"}},
			&Impersonation{User: "bob", UID: "42", Extra: map[string][]string{"example.com/team": {"x"}}}, false},
		{"groups without a user", http.Header{"Impersonate-Group": {"system:masters"}}, nil, true},
		{"two users", http.Header{"Impersonate-User": {"bob"}, "X-Remote-User": {"alice"}}, nil, true},
	} {
		got, err := Requested(tc.headers)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestForwardReplacesClientIdentityHeaders(t *testing.T) {
	h := http.Header{
		"Authorization":     {"Bearer secret"},
		"Impersonate-User":  {"rampart-admin"},
		"Impersonate-Group": {"system:masters"},
		"X-Remote-User":     {"rampart-admin"},
		"X-Remote-Extra-A":  {"b"},
		"Accept":            {"application/json"},
	}
	Forward(h, User{Name: "oidc:alice", UID: "u-1", Groups: []string{"dev", "system:authenticated"},
		Extra: map[string][]string{"example.com/pod-name": {"bot-1"}}})
	want := http.Header{
		"Impersonate-User":                         {"oidc:alice"},
		"Impersonate-Uid":                          {"u-1"},
		"Impersonate-Group":                        {"dev", "system:authenticated"},
		"Impersonate-Extra-Example.com%2fpod-Name": {"bot-1"}, // the API server lower-cases and unescapes
		"Accept": {"application/json"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("forwarded headers\n got %v\nwant %v", h, want)
	}
}

// Service accounts and nodes are impersonated by name alone: constrained
// impersonation refuses them with anything else, and gives them their
// fixed groups itself.
func TestForwardServiceAccountsAndNodesByName(t *testing.T) {
	for _, u := range []User{
		{Name: "system:serviceaccount:ci:bot", UID: "u-1", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"},
			Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"bot-1"}}},
		{Name: "system:node:worker-1", Groups: []string{"system:nodes", "system:authenticated"}},
	} {
		h := http.Header{"Impersonate-Group": {"system:masters"}}
		Forward(h, u)
		if want := (http.Header{"Impersonate-User": {u.Name}}); !reflect.DeepEqual(h, want) {
			t.Errorf("%s: forwarded %v, want %v", u.Name, h, want)
		}
	}
	// Not a node name the API server accepts: impersonated as any user.
	h := http.Header{}
	Forward(h, User{Name: "system:node:Not_A_Node", Groups: []string{"g"}})
	if h.Get("Impersonate-Group") != "g" {
		t.Errorf("system:node:Not_A_Node forwarded %v, want its groups too", h)
	}
}

func TestMastersAreNotForwarded(t *testing.T) {
	if err := Forwardable(User{Name: "admin", Groups: []string{"dev", "system:masters"}}); !errors.Is(err, ErrMasters) {
		t.Errorf("a member of system:masters: %v, want ErrMasters", err)
	}
	if err := Forwardable(User{Name: "alice", Groups: []string{"dev", "system:authenticated"}}); err != nil {
		t.Errorf("alice: %v, want forwardable", err)
	}
}

func TestTokenReviewsAreCachedAndShared(t *testing.T) {
	cs := fake.NewClientset()
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "good" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"dev"}}}
		}
		return true, tr, nil
	})
	a := New(cs.AuthenticationV1().TokenReviews(), cs.AuthorizationV1().SubjectAccessReviews(), Defaults)
	req := func(token string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "https://gw/api", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	for range 3 {
		u, err := a.Authenticate(context.Background(), req("good"))
		if err != nil || u.Name != "alice" {
			t.Fatalf("good token: %+v, %v", u, err)
		}
	}
	for range 3 {
		if _, err := a.Authenticate(context.Background(), req("bad")); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("bad token: %v, want ErrUnauthorized", err)
		}
	}
	if reviews != 2 {
		t.Errorf("%d TokenReviews for 6 requests with 2 tokens, want 2 (answers cached)", reviews)
	}
	r, _ := http.NewRequest(http.MethodGet, "https://gw/api", nil)
	r.Header.Set("Authorization", "Basic YTpi")
	if _, err := a.Authenticate(context.Background(), r); !errors.Is(err, ErrUnsupportedAuthorization) {
		t.Errorf("basic auth: %v, want ErrUnsupportedAuthorization", err)
	}
	r.Header.Del("Authorization")
	if u, err := a.Authenticate(context.Background(), r); err != nil || u.Name != "system:anonymous" {
		t.Errorf("no credentials: %+v, %v; want anonymous", u, err)
	}
	strict := New(cs.AuthenticationV1().TokenReviews(), cs.AuthorizationV1().SubjectAccessReviews(), Options{CacheSize: 10, NoAnonymous: true})
	if _, err := strict.Authenticate(context.Background(), r); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("no credentials with anonymous refused: %v, want ErrNoCredentials", err)
	}
}

func TestMayImpersonateAsksLikeTheAPIServer(t *testing.T) {
	cs := fake.NewClientset()
	var asked []authorizationv1.ResourceAttributes
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		asked = append(asked, *sar.Spec.ResourceAttributes)
		sar.Status.Allowed = sar.Spec.User == "support" && sar.Spec.ResourceAttributes.Name != "system:masters"
		return true, sar, nil
	})
	a := New(cs.AuthenticationV1().TokenReviews(), cs.AuthorizationV1().SubjectAccessReviews(), Defaults)
	imp := &Impersonation{User: "system:serviceaccount:ci:bot", UID: "7", Groups: []string{"dev"}, Extra: map[string][]string{"scopes": {"view"}}}
	if err := a.MayImpersonate(context.Background(), User{Name: "support"}, imp); err != nil {
		t.Fatal(err)
	}
	want := []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "ci", Name: "bot"},
		{Verb: "impersonate", Resource: "groups", Name: "dev"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids", Name: "7"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: "scopes", Name: "view"},
	}
	if !reflect.DeepEqual(asked, want) {
		t.Errorf("asked\n %+v\nwant\n %+v", asked, want)
	}
	err := a.MayImpersonate(context.Background(), User{Name: "support"}, &Impersonation{User: "bob", Groups: []string{"system:masters"}})
	var forbidden *Forbidden
	if !errors.As(err, &forbidden) {
		t.Fatalf("impersonating system:masters: %v, want Forbidden", err)
	}
}
