// Package traffic holds the gateway's pure decisions: what a request is
// (verb, resource, namespace), which TrafficPolicy matches it, and whether
// the policy's limit admits it now. The clock is passed in; nothing here
// does I/O.
package traffic

import (
	"net/http"
	"net/url"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
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
// (watches, proxies, and upgraded or streamed subresources); it is not
// counted against in-flight limits and is balanced separately. These are
// kube-apiserver's long-running requests (its
// BasicLongRunningRequestCheck: verbs watch and proxy; subresources
// attach, exec, proxy, log and portforward; /debug/pprof/), written out
// because that function's package would pull the API server's whole
// filter chain into the gateway; the fuzz target compares the two.
func (r Request) LongRunning() bool {
	if r.Verb == "watch" || r.Verb == "proxy" {
		return true
	}
	if !r.IsResource {
		return strings.HasPrefix(r.Path, "/debug/pprof/")
	}
	switch r.Subresource {
	case "exec", "attach", "portforward", "proxy", "log":
		return true
	}
	return false
}

// apiServerRequests classifies requests exactly as kube-apiserver does:
// its RequestInfoFactory with the prefixes its generic server is built
// with (server.NewRequestInfoResolver: "apis", and the legacy, groupless
// "api"). FuzzClassifyLikeAPIServer holds the two together.
var apiServerRequests = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// Info parses r as kube-apiserver will, with its RequestInfoFactory: the
// verb, resource, subresource, namespace and name it authorizes
// (`GET .../secrets/NAME?watch=1` is a get, and `?watch=t` on a collection
// is a watch). A path the API server cannot classify (/api/v1/watch) is
// described as far as it goes; the API server refuses it. The gateway
// parses each request once, here, and carries the result in the request's
// context (request.WithRequestInfo), as the API server's own filters do.
func Info(r *http.Request) *request.RequestInfo {
	// On an error the info goes as far as the path could be read, which
	// is what the API server acts on too.
	info, _ := apiServerRequests.NewRequestInfo(r)
	if info == nil {
		return &request.RequestInfo{Path: r.URL.Path, Verb: strings.ToLower(r.Method)}
	}
	return info
}

// Describe reads r as kube-apiserver will (Info), and a LIST's or
// watch's parameters by the API server's own conversion.
func Describe(r *http.Request) Request { return FromInfo(Info(r), r.URL) }

// FromInfo is the Request of a request the API server classifies as info,
// whose URL is u.
func FromInfo(info *request.RequestInfo, u *url.URL) Request {
	req := Request{
		Path: info.Path, IsResource: info.IsResourceRequest, Verb: info.Verb,
		APIGroup: info.APIGroup, Version: info.APIVersion,
		Resource: info.Resource, Subresource: info.Subresource,
		Namespace: info.Namespace, Name: info.Name,
	}
	if req.IsResource && (req.Verb == "list" || req.Verb == "watch") {
		describeList(&req, u.Query())
	}
	return req
}

// describeList reads a LIST's or watch's parameters with the first step of
// the API server's decoding (query to metav1.ListOptions, the same
// generated conversion), which the full decode would only add selector
// parsing to, at ten times the cost. A query the API server cannot decode
// makes it answer 400 without serving anything; a limit that does not
// parse is read as none here (an unpaginated LIST: the safe side).
func describeList(req *Request, query url.Values) {
	var opts metav1.ListOptions
	if err := metav1.Convert_url_Values_To_v1_ListOptions(&query, &opts, nil); err != nil {
		return
	}
	req.Limit, req.ResourceVersion, req.SendInitialEvents = opts.Limit, opts.ResourceVersion, opts.SendInitialEvents
	// A watch of a named object (the legacy /watch/.../NAME) streams one
	// object; so does a LIST or watch whose fieldSelector names one.
	req.SingleObject = req.Verb == "watch" && req.Name != ""
	if opts.FieldSelector != "" {
		if sel, err := fields.ParseSelector(opts.FieldSelector); err == nil {
			if _, ok := sel.RequiresExactMatch("metadata.name"); ok {
				req.SingleObject = true
			}
		}
	}
}
