// Package identity authenticates the gateway's clients and decides which
// identity a request is forwarded with.
//
// Clients authenticate to the gateway as they would to kube-apiserver:
// with a client certificate signed by the cluster's client CA (CN is the
// user, O the groups) or a bearer token, which the gateway checks with a
// TokenReview and caches for a bounded time. A request with neither is
// anonymous (system:anonymous, as the API server would see it).
//
// A client may ask to act as someone else with Impersonate-* headers, or
// X-Remote-* request headers as a front proxy would send. The gateway only
// lets that through when the API server says, by SubjectAccessReview, that
// the authenticated client may impersonate each requested user, group,
// UID and extra; the answers are cached like tokens.
package identity

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/validation"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// User is an authenticated requester.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Anonymous is who a request without credentials is.
var Anonymous = User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}

// Options bound the caches.
type Options struct {
	// TokenTTL is how long a TokenReview's yes is trusted; a revoked
	// token keeps working through the gateway at most this long.
	TokenTTL time.Duration
	// NegativeTTL is how long a no is remembered, so a client retrying a
	// bad token does not send a TokenReview each time.
	NegativeTTL time.Duration
	// AccessTTL is how long an impersonation SubjectAccessReview's answer
	// is trusted.
	AccessTTL time.Duration
	// CacheSize bounds each cache (least recently used entries go first).
	CacheSize int
	// NoAnonymous refuses requests without credentials, for clusters
	// whose API servers run with --anonymous-auth=false: forwarding them
	// as system:anonymous would let in what the API server keeps out.
	NoAnonymous bool
}

// Defaults are the options of `rampart gateway` unless flags say otherwise.
var Defaults = Options{TokenTTL: 10 * time.Second, NegativeTTL: 2 * time.Second, AccessTTL: 10 * time.Second, CacheSize: 10000}

// Authenticator checks credentials and impersonation requests.
type Authenticator struct {
	tokens  authenticationclient.TokenReviewInterface
	access  authorizationclient.SubjectAccessReviewInterface
	opts    Options
	cache   *cache.LRUExpireCache
	flights singleflight.Group
}

// New returns an Authenticator asking the API server through tokens and
// access.
func New(tokens authenticationclient.TokenReviewInterface, access authorizationclient.SubjectAccessReviewInterface, opts Options) *Authenticator {
	return &Authenticator{tokens: tokens, access: access, opts: opts, cache: cache.NewLRUExpireCache(opts.CacheSize)}
}

// ErrUnauthorized is a credential the API server does not accept.
var ErrUnauthorized = errors.New("invalid bearer token: get a new one (kubectl create token, or your identity provider)")

// ErrNoCredentials is a request without credentials when anonymous
// requests are refused.
var ErrNoCredentials = errors.New("anonymous requests are refused: authenticate with a client certificate or a bearer token")

// ErrUnsupportedAuthorization is an Authorization header that is not a
// bearer token.
var ErrUnsupportedAuthorization = errors.New("unsupported Authorization header: use a bearer token or a client certificate")

// Authenticate returns who sent r. A verified client certificate wins (as
// in kube-apiserver, which tries certificates first); else a bearer token;
// else the request is anonymous.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (User, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return FromCertificate(r.TLS.VerifiedChains[0][0]), nil
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		if a.opts.NoAnonymous {
			return User{}, ErrNoCredentials
		}
		return Anonymous, nil
	}
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return User{}, ErrUnsupportedAuthorization
	}
	return a.reviewToken(ctx, strings.TrimSpace(token))
}

// FromCertificate is the user a client certificate names.
func FromCertificate(c *x509.Certificate) User {
	return User{Name: c.Subject.CommonName, Groups: slices.Clone(c.Subject.Organization)}
}

type tokenAnswer struct {
	user User
	ok   bool
}

func (a *Authenticator) reviewToken(ctx context.Context, token string) (User, error) {
	sum := sha256.Sum256([]byte(token))
	key := "token/" + hex.EncodeToString(sum[:])
	if v, ok := a.cache.Get(key); ok {
		ans := v.(tokenAnswer)
		if !ans.ok {
			return User{}, ErrUnauthorized
		}
		return ans.user, nil
	}
	// Concurrent requests with one new token share one TokenReview.
	v, err, _ := a.flights.Do(key, func() (any, error) {
		review, err := a.tokens.Create(context.WithoutCancel(ctx), &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("checking the bearer token with a TokenReview: %w", err)
		}
		ans := tokenAnswer{ok: review.Status.Authenticated}
		ttl := a.opts.NegativeTTL
		if ans.ok {
			u := review.Status.User
			ans.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups}
			if len(u.Extra) > 0 {
				ans.user.Extra = map[string][]string{}
				for k, v := range u.Extra {
					ans.user.Extra[k] = v
				}
			}
			ttl = a.opts.TokenTTL
		}
		a.cache.Add(key, ans, ttl)
		return ans, nil
	})
	if err != nil {
		return User{}, err
	}
	ans := v.(tokenAnswer)
	if !ans.ok {
		return User{}, ErrUnauthorized
	}
	return ans.user, nil
}

// Impersonation is who a client asks to act as.
type Impersonation struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Requested reads the Impersonate-* and X-Remote-* headers of h. A client
// sending X-Remote-* asks for the same as with Impersonate-*: it is judged
// the same way and never reaches the API server as X-Remote-*. Nil means
// the client asks for nothing.
func Requested(h http.Header) (*Impersonation, error) {
	var imp Impersonation
	asked := false
	for name, values := range h {
		canon := http.CanonicalHeaderKey(name)
		switch {
		case canon == "Impersonate-User" || canon == "X-Remote-User":
			if imp.User != "" && imp.User != values[0] || len(values) > 1 {
				return nil, errors.New("more than one user to impersonate")
			}
			imp.User = values[0]
		case canon == "Impersonate-Uid":
			imp.UID = values[0]
		case canon == "Impersonate-Group" || canon == "X-Remote-Group":
			imp.Groups = append(imp.Groups, values...)
		case strings.HasPrefix(canon, "Impersonate-Extra-") || strings.HasPrefix(canon, "X-Remote-Extra-"):
			raw := strings.TrimPrefix(strings.TrimPrefix(canon, "Impersonate-Extra-"), "X-Remote-Extra-")
			key, err := url.PathUnescape(raw)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", name, err)
			}
			if imp.Extra == nil {
				imp.Extra = map[string][]string{}
			}
			key = strings.ToLower(key)
			imp.Extra[key] = append(imp.Extra[key], values...)
		default:
			continue
		}
		asked = true
	}
	if !asked {
		return nil, nil
	}
	if imp.User == "" {
		return nil, errors.New("impersonating groups, a UID or extras needs a user to impersonate (Impersonate-User)")
	}
	return &imp, nil
}

// Identity headers a client may not pass on: the gateway sets them.
func IsIdentityHeader(name string) bool {
	canon := http.CanonicalHeaderKey(name)
	return strings.HasPrefix(canon, "Impersonate-") || strings.HasPrefix(canon, "X-Remote-")
}

// Forbidden is an impersonation the API server does not allow the client.
type Forbidden struct{ Reason string }

func (f *Forbidden) Error() string { return f.Reason }

// MayImpersonate asks the API server, one SubjectAccessReview per
// requested attribute, whether client may impersonate imp: the same checks
// kube-apiserver's impersonation filter makes. The first refusal is
// returned as *Forbidden.
func (a *Authenticator) MayImpersonate(ctx context.Context, client User, imp *Impersonation) error {
	type check struct{ resource, subresource, namespace, name string }
	var checks []check
	if ns, sa, ok := serviceAccount(imp.User); ok {
		checks = append(checks, check{"serviceaccounts", "", ns, sa})
	} else {
		checks = append(checks, check{"users", "", "", imp.User})
	}
	for _, g := range imp.Groups {
		checks = append(checks, check{"groups", "", "", g})
	}
	if imp.UID != "" {
		checks = append(checks, check{"uids", "", "", imp.UID})
	}
	keys := make([]string, 0, len(imp.Extra))
	for k := range imp.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range imp.Extra[k] {
			checks = append(checks, check{"userextras", k, "", v})
		}
	}
	for _, c := range checks {
		allowed, err := a.allowed(ctx, client, authorizationv1.ResourceAttributes{
			Verb: "impersonate", Resource: c.resource, Subresource: c.subresource, Namespace: c.namespace, Name: c.name,
		})
		if err != nil {
			return err
		}
		if !allowed {
			what := strings.TrimSuffix(c.resource, "s")
			if c.subresource != "" {
				what += " " + c.subresource
			}
			return &Forbidden{Reason: fmt.Sprintf("%s %q cannot impersonate %s %q: the API server does not grant it verb impersonate on %s. Ask for that right, or send the request without Impersonate-*/X-Remote-* headers",
				client.Name, client.Name, what, c.name, c.resource)}
		}
	}
	return nil
}

func (a *Authenticator) allowed(ctx context.Context, u User, attrs authorizationv1.ResourceAttributes) (bool, error) {
	// As kube-apiserver's impersonation filter asks: users, groups and
	// service accounts in the core group, UIDs and extras in
	// authentication.k8s.io.
	attrs.Group = ""
	if attrs.Resource == "userextras" || attrs.Resource == "uids" {
		attrs.Group = "authentication.k8s.io"
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	key := fmt.Sprintf("sar/%q/%q/%q/%q/%v", u.Name, u.UID, u.Groups, attrs, u.Extra)
	if v, ok := a.cache.Get(key); ok {
		return v.(bool), nil
	}
	v, err, _ := a.flights.Do(key, func() (any, error) {
		review, err := a.access.Create(context.WithoutCancel(ctx), &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Name, UID: u.UID, Groups: u.Groups, Extra: extra, ResourceAttributes: &attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("asking the API server whether %s may impersonate: %w", u.Name, err)
		}
		a.cache.Add(key, review.Status.Allowed, a.opts.AccessTTL)
		return review.Status.Allowed, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

func serviceAccount(user string) (ns, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != ""
}

// Forward sets on h the headers that make the API server, which
// authenticates the gateway by its own certificate, act as u: the
// Impersonate-* headers, with extra keys escaped as the API server reads
// them. Whatever identity headers the client sent are removed first, as is
// its Authorization: the gateway has checked it and the API server needs
// only the gateway's own credentials.
//
// The gateway holds constrained impersonation rights only (ClusterRole),
// under which the API server lets a service account or a node be
// impersonated by user name alone: it sets their groups itself
// (system:serviceaccounts and system:serviceaccounts:NS, or
// system:nodes, and system:authenticated), the groups their own
// credentials carry. Their UID and extras (a bound token's pod) are not
// forwarded.
func Forward(h http.Header, u User) {
	for name := range h {
		if IsIdentityHeader(name) {
			delete(h, name)
		}
	}
	h.Del("Authorization")
	h.Set("Impersonate-User", u.Name)
	if byNameAlone(u.Name) {
		return
	}
	if u.UID != "" {
		h.Set("Impersonate-Uid", u.UID)
	}
	for _, g := range u.Groups {
		h.Add("Impersonate-Group", g)
	}
	for k, vs := range u.Extra {
		name := "Impersonate-Extra-" + url.PathEscape(k)
		for _, v := range vs {
			h.Add(name, v)
		}
	}
}

// byNameAlone says whether the API server's constrained impersonation
// takes user only by name: service accounts and nodes (a node name is a
// DNS subdomain, as the API server checks it).
func byNameAlone(user string) bool {
	if _, _, ok := serviceAccount(user); ok {
		return true
	}
	node, ok := strings.CutPrefix(user, "system:node:")
	return ok && len(validation.IsDNS1123Subdomain(node)) == 0
}

// MastersGroup is the group kube-apiserver lets past all authorization.
const MastersGroup = "system:masters"

// ErrMasters refuses to forward a member of system:masters.
var ErrMasters = errors.New("members of group " + MastersGroup + " are not forwarded by the gateway: the API server refuses to let the gateway impersonate that group " +
	"(constrained impersonation), so that the gateway's own credentials can never act as it. Send cluster-admin requests to the API server directly " +
	"(its address instead of the gateway's in your kubeconfig), or use an identity whose rights come from RBAC")

// Forwardable says whether the gateway may forward a request as u: not
// as a member of system:masters, which the API server would refuse to let
// the gateway impersonate anyway, with a less useful message.
func Forwardable(u User) error {
	if slices.Contains(u.Groups, MastersGroup) {
		return ErrMasters
	}
	return nil
}

// AsUser is the identity an allowed impersonation forwards.
func (imp *Impersonation) AsUser() User {
	return User{Name: imp.User, UID: imp.UID, Groups: imp.Groups, Extra: imp.Extra}
}
