package traffic

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
)

// kubeAPIServer is how kube-apiserver classifies requests: the generic
// server's default configuration (kube-apiserver keeps its legacy
// prefix), its resolver, and the long-running check kube-apiserver
// installs (cmd/kube-apiserver: verbs watch and proxy; subresources
// attach, exec, proxy, log, portforward).
var kubeAPIServer = struct {
	resolver    request.RequestInfoResolver
	longRunning request.LongRunningRequestCheck
}{
	resolver: server.NewRequestInfoResolver(server.NewConfig(serializer.NewCodecFactory(runtime.NewScheme()))),
	longRunning: genericfilters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"), sets.NewString("attach", "exec", "proxy", "log", "portforward")),
}

var fuzzMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "get", "TRACE"}

// FuzzClassifyLikeAPIServer: for any method, path and query, what a
// policy matches (verb, group, version, resource, subresource, namespace,
// name, resource or not), whether the request is long-running, and the
// LIST/watch parameters the guards price must be what kube-apiserver
// reads from the same request. The seeds are the bypasses of issue 24 and
// the shapes clients send.
func FuzzClassifyLikeAPIServer(f *testing.F) {
	for _, seed := range []struct {
		method uint8
		target string
	}{
		{0, "/api/v1/namespaces/shop/secrets/db?watch=1"},
		{0, "/api/v1/namespaces/shop/secrets/db?watch=true&resourceVersion=0"},
		{0, "/api/v1/namespaces/shop/secrets?watch=t"},
		{0, "/api/v1/namespaces/shop/secrets?watch=TRUE"},
		{0, "/api/v1/namespaces/shop/secrets?watch="},
		{0, "/api/v1/namespaces/shop/secrets?watch=0"},
		{0, "/api/v1/namespaces/shop/secrets?watch=FaLsE"},
		{0, "/api/v1/namespaces/shop/secrets?watch=yes&watch=false"},
		{0, "/api/v1/namespaces/shop/secrets?watch"},
		{0, "/api/v1/secrets?watch=1&limit=abc"},
		{0, "/api/v1/secrets?watch=1&limit=-5"},
		{0, "/api/v1/secrets?limit=500&resourceVersion=0&resourceVersionMatch=NotOlderThan"},
		{0, "/api/v1/pods?watch=1&sendInitialEvents=t&allowWatchBookmarks=true"},
		{0, "/api/v1/pods?watch=1&sendInitialEvents=no"},
		{0, "/api/v1/pods?fieldSelector=metadata.name%3Dweb-1"},
		{0, "/api/v1/pods?fieldSelector=metadata.name%3D..&watch=1"},
		{0, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1,metadata.name%3Dx"},
		{0, "/api/v1/pods?fieldSelector=%3D%3D%3D&watch=TRUE"},
		{0, "/api/v1/pods?labelSelector=app%20in%20(a"},
		{0, "/api/v1/watch/namespaces/shop/secrets/db"},
		{0, "/api/v1/watch/namespaces/shop/secrets"},
		{0, "/api/v1/watch/secrets?watch=false"},
		{0, "/api/v1/watch"},
		{0, "/api/v1/proxy/namespaces/shop/pods/web-1/metrics"},
		{0, "/api/v1/proxy/nodes/n1/pods"},
		{0, "/api/v1/proxy"},
		{0, "/api/v1/namespaces/shop/pods/web-1/exec?command=sh"},
		{0, "/api/v1/namespaces/shop/pods/web-1/log?follow=true"},
		{0, "/api/v1/namespaces/shop/services/web:80/proxy/metrics"},
		{0, "/api/v1/namespaces"},
		{0, "/api/v1/namespaces/shop"},
		{4, "/api/v1/namespaces/shop/finalize"},
		{0, "/api/v1/namespaces/shop/status"},
		{0, "/api/v1/namespaces/status"},
		{5, "/api/v1/namespaces/shop/pods"},
		{5, "/api/v1/namespaces/shop/pods/web-1?watch=1"},
		{2, "/api/v1/namespaces/shop/pods?watch=1"},
		{3, "/apis/apps/v1/namespaces/shop/deployments/web/scale"},
		{4, "/apis/apps/v1/namespaces/shop/deployments/web"},
		{0, "/apis/apps/v1/deployments?watch=1"},
		{0, "/apis/apps/v1"},
		{0, "/apis/apps"},
		{0, "/apis"},
		{0, "/api/v1"},
		{0, "/api"},
		{0, "/apis/rampart.io/v1alpha1/trafficpolicies/p/status"},
		{0, "/apis/v1/pods"},
		{0, "/api/apps/v1/deployments"},
		{0, "//api//v1//namespaces//shop//secrets//db?watch=1"},
		{0, "/api/v1/namespaces/shop/secrets/db/?watch=1"},
		{0, "/api/v1/namespaces/shop/secrets/db%2Fx?watch=1"},
		{0, "/api/v1/namespaces/shop/secrets/../secrets?watch=1"},
		{0, "/healthz"},
		{0, "/readyz?verbose"},
		{0, "/debug/pprof/profile"},
		{0, "/openapi/v3/apis/apps/v1"},
		{1, "/api/v1/pods?watch=1"},
		{6, "/api/v1/pods"},
		{7, "/api/v1/pods/x"},
		{8, "/api/v1/pods"},
		{9, "/api/v1/pods"},
	} {
		f.Add(seed.method, seed.target)
	}
	f.Fuzz(func(t *testing.T, method uint8, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return // the gateway's HTTP server refuses it before the gateway sees it
		}
		r := &http.Request{Method: fuzzMethods[int(method)%len(fuzzMethods)], URL: u, Header: http.Header{}}
		got := Describe(r)

		info, _ := kubeAPIServer.resolver.NewRequestInfo(r)
		want := Request{
			Path: info.Path, IsResource: info.IsResourceRequest, Verb: info.Verb,
			APIGroup: info.APIGroup, Version: info.APIVersion,
			Resource: info.Resource, Subresource: info.Subresource,
			Namespace: info.Namespace, Name: info.Name,
		}
		// What the API server's list handler reads (handlers/get.go
		// ListResource decodes the query with this codec). A query that
		// does not decode is refused with 400 and served never: what the
		// gateway priced it at does not matter.
		if info.IsResourceRequest && (info.Verb == "list" || info.Verb == "watch") {
			var opts metainternalversion.ListOptions
			if metainternalversionscheme.ParameterCodec.DecodeParameters(u.Query(), metav1.SchemeGroupVersion, &opts) == nil {
				want.Limit, want.ResourceVersion, want.SendInitialEvents = opts.Limit, opts.ResourceVersion, opts.SendInitialEvents
			} else {
				got.Limit, got.ResourceVersion, got.SendInitialEvents = 0, "", nil
			}
		}
		got.SingleObject = false // the gateway's own reading, tested in TestDescribe
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s:\ngateway    %+v\napiserver  %+v", r.Method, target, got, want)
		}
		if long := kubeAPIServer.longRunning(r, info); got.LongRunning() != long {
			t.Errorf("%s %s: gateway says long-running %v, kube-apiserver %v", r.Method, target, got.LongRunning(), long)
		}
	})
}
