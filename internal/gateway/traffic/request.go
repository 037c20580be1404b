// Package traffic holds the gateway's pure decisions: what a request is
// (verb, resource, namespace), which TrafficPolicy matches it, and whether
// the policy's limit admits it now. The clock is passed in; nothing here
// does I/O.
package traffic

import (
	"net/url"
	"strconv"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Request is what policies match on: the requester as the gateway
// authenticated it and the request as kube-apiserver will read it.
type Request struct {
	// User and Groups are the client the gateway authenticated.
	User      string
	Groups    []string
	UserAgent string
	// Impersonated is whom the client impersonates, once the gateway
	// has checked that it may; nil when it impersonates no one.
	Impersonated *authenticationv1.UserInfo

	// IsResource is true for /api and /apis requests naming a resource.
	IsResource bool
	Verb       string
	APIGroup   string
	// Version is the API version in the path (v1, v1beta1): the gateway
	// needs it to watch a resource it counts.
	Version     string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// Path is the URL path, for non-resource matching.
	Path string

	// Limit and ResourceVersion are what a LIST's query says about how
	// it will be served: in pages of Limit objects (0: all at once), and
	// from the API server's cache (ResourceVersion "0") or from etcd.
	Limit           int64
	ResourceVersion string
	// SendInitialEvents is a watch's sendInitialEvents (nil: not sent).
	// With it, or without it from resourceVersion "" or "0", a watch
	// first streams every object in its scope (see InitialEvents).
	SendInitialEvents *bool
	// SingleObject is true when a fieldSelector names one object
	// (metadata.name=X), as kubectl wait and single-object informers
	// send: such a LIST or watch returns at most one object.
	SingleObject bool
}

// InitialEvents says whether a watch starts by streaming the state of
// every object in its scope, as kube-apiserver decides it (watch_cache.go
// getAllEventsSinceLocked): sendInitialEvents=true (a client-go 1.35+
// informer's watch-list), or the legacy watch from resourceVersion "" or
// "0". Only a watch resuming from a resourceVersion, or one that sets
// sendInitialEvents=false, streams changes alone.
func (r Request) InitialEvents() bool {
	if r.Verb != "watch" {
		return false
	}
	if r.SendInitialEvents != nil {
		return *r.SendInitialEvents
	}
	return r.ResourceVersion == "" || r.ResourceVersion == "0"
}

// LongRunning says whether the request holds its connection open by design
// (watches, and upgraded or streamed subresources); it is not counted
// against in-flight limits and is balanced separately.
func (r Request) LongRunning() bool {
	if r.Verb == "watch" {
		return true
	}
	switch r.Subresource {
	case "exec", "attach", "portforward", "proxy", "log":
		return true
	}
	return false
}

// Describe parses a request the way kube-apiserver's RequestInfoFactory
// does, for the paths clients send: /api/v1/..., /apis/GROUP/VERSION/...,
// the legacy /watch/ prefix and ?watch=true. Anything else is a
// non-resource request with the HTTP method as verb.
func Describe(method, path string, query url.Values) Request {
	r := Request{Path: path, Verb: strings.ToLower(method)}
	parts := splitPath(path)
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		r.Version = parts[1]
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		r.APIGroup, r.Version = parts[1], parts[2]
		rest = parts[3:]
	default:
		return r
	}
	if len(rest) == 0 {
		return r // discovery: /api/v1, /apis/apps/v1
	}
	r.IsResource = true
	watchPrefix := false
	if rest[0] == "watch" {
		watchPrefix = true
		rest = rest[1:]
	}
	// namespaces/NS/RESOURCE... is namespaced; namespaces,
	// namespaces/NAME and its status and finalize subresources are the
	// namespace resource itself.
	if len(rest) >= 3 && rest[0] == "namespaces" && rest[2] != "status" && rest[2] != "finalize" {
		r.Namespace = rest[1]
		rest = rest[2:]
	}
	if len(rest) == 0 {
		r.IsResource = false
		return r
	}
	r.Resource = rest[0]
	if len(rest) >= 2 {
		r.Name = rest[1]
	}
	if len(rest) >= 3 {
		r.Subresource = rest[2]
	}
	if r.Resource == "namespaces" && r.Name != "" {
		r.Namespace = r.Name
	}
	r.Verb = verb(method, r.Name != "", watchPrefix || query.Get("watch") == "true" || query.Get("watch") == "1")
	// A limit that does not parse is refused by the API server; reading
	// it as 0 here prices the request as unpaginated, the safe side.
	r.Limit, _ = strconv.ParseInt(query.Get("limit"), 10, 64)
	r.ResourceVersion = query.Get("resourceVersion")
	if v, err := strconv.ParseBool(query.Get("sendInitialEvents")); err == nil {
		r.SendInitialEvents = &v
	}
	if fs := query.Get("fieldSelector"); fs != "" {
		if sel, err := fields.ParseSelector(fs); err == nil {
			_, r.SingleObject = sel.RequiresExactMatch("metadata.name")
		}
	}
	return r
}

func verb(method string, named, watch bool) string {
	switch method {
	case "GET", "HEAD":
		if watch {
			return "watch"
		}
		if named {
			return "get"
		}
		return "list"
	case "POST":
		return "create"
	case "PUT":
		return "update"
	case "PATCH":
		return "patch"
	case "DELETE":
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(method)
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
