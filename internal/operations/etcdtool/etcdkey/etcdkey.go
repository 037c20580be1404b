// Package etcdkey reads the API server's etcd keys,
// /registry/<resource>/<namespace>/<name> (or /registry/<group>/<resource>/...
// for resources outside the legacy groups), into their parts.
package etcdkey

import "strings"

// Prefix is the API server's default --etcd-prefix.
const Prefix = "/registry/"

// Key is one etcd key split into the parts the API server put in it.
type Key struct {
	// Resource is the storage resource, "group/resource" when the key
	// names a group ("apiextensions.k8s.io/customresourcedefinitions"),
	// and "services/specs" for the two-level services keys. Keys outside
	// /registry/ have their first path element, or "(other)".
	Resource string
	// Namespace is empty for cluster-scoped objects.
	Namespace string
	Name      string
}

// Parse splits a key. Whether an object is namespaced is read from the
// key's shape: <resource>/<ns>/<name> or <resource>/<name>.
func Parse(key string) Key {
	rest, ok := strings.CutPrefix(key, Prefix)
	if !ok {
		first, _, _ := strings.Cut(strings.TrimPrefix(key, "/"), "/")
		if first == "" {
			first = "(other)"
		}
		return Key{Resource: first, Name: key}
	}
	parts := strings.Split(rest, "/")
	res := parts[0]
	parts = parts[1:]
	// A dot in the first element is an API group: the resource follows.
	if strings.Contains(res, ".") && len(parts) > 1 {
		res += "/" + parts[0]
		parts = parts[1:]
	}
	// services/specs/<ns>/<name> and services/endpoints/<ns>/<name>.
	if len(parts) > 2 {
		res += "/" + parts[0]
		parts = parts[1:]
	}
	switch len(parts) {
	case 0:
		return Key{Resource: res}
	case 1:
		return Key{Resource: res, Name: parts[0]}
	default:
		return Key{Resource: res, Namespace: parts[0], Name: strings.Join(parts[1:], "/")}
	}
}

// GroupResource returns the API group in the resource, if the key names
// one, and the resource's plural name.
func (k Key) GroupResource() (group, resource string) {
	g, r, ok := strings.Cut(k.Resource, "/")
	if ok && strings.Contains(g, ".") {
		return g, r
	}
	if ok {
		return "", g
	}
	return "", k.Resource
}

// PrefixOf is the prefix a key is counted under: /registry/RESOURCE/ for
// cluster-scoped objects, /registry/RESOURCE/NAMESPACE/ for namespaced
// ones, /FIRST for keys outside /registry/.
func PrefixOf(key string) string {
	k := Parse(key)
	if !strings.HasPrefix(key, Prefix) {
		return "/" + k.Resource
	}
	p := Prefix + k.Resource + "/"
	if k.Namespace != "" {
		p += k.Namespace + "/"
	}
	return p
}
