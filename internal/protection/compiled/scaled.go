package compiled

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ScaledResource is a custom resource whose CRD has a scale subresource:
// a workload like the built-in ones, whose explicit replicas are compiled
// with its replicas read where the CRD keeps them.
type ScaledResource struct {
	// CRD is the CRD's name (plural.group): it names the compiled policies.
	CRD      string
	Resource schema.GroupResource
	// Path is the CRD's specReplicasPath, e.g. ".spec.size".
	Path string
}

// ReplicasCEL is the replicas of obj (object, oldObject) in CEL, as the
// compiled policies read them: 1 when absent or not an integer.
func (s ScaledResource) ReplicasCEL(obj string) string { return s.path().at(obj) }

func (s ScaledResource) path() replicasPath {
	return replicasPath{fields: strings.Split(strings.TrimPrefix(s.Path, "."), "."), custom: true}
}

// NotCompiled is a CRD with a scale subresource whose replicas are left to
// the webhook, and why.
type NotCompiled struct{ CRD, Why string }

// ScaledResources are the custom resources of crds with a scale
// subresource whose replicas can be compiled, sorted by CRD, and the CRDs
// left to the webhook with the reason. The webhook reads a custom
// resource's replicas at the specReplicasPath of the first served version
// with a scale subresource, whatever the request's version: a CRD whose
// served versions disagree is left to it, as one path for every version
// is all a policy matching every version could say.
func ScaledResources(crds []apiextensionsv1.CustomResourceDefinition) ([]ScaledResource, []NotCompiled) {
	var out []ScaledResource
	var left []NotCompiled
	for i := range crds {
		crd := &crds[i]
		var paths []string
		for _, v := range crd.Spec.Versions {
			if v.Served && v.Subresources != nil && v.Subresources.Scale != nil && !slices.Contains(paths, v.Subresources.Scale.SpecReplicasPath) {
				paths = append(paths, v.Subresources.Scale.SpecReplicasPath)
			}
		}
		switch {
		case len(paths) == 0 || crd.DeletionTimestamp != nil:
			continue
		case len(paths) > 1:
			left = append(left, NotCompiled{crd.Name, fmt.Sprintf("its served versions keep replicas at different paths (%s)", strings.Join(paths, ", "))})
		case celPath(paths[0]) != nil:
			left = append(left, NotCompiled{crd.Name, fmt.Sprintf("its replicas path %q: %v", paths[0], celPath(paths[0]))})
		case len(validation.IsDNS1123Subdomain(LabelScaledName(crd.Name))) > 0:
			left = append(left, NotCompiled{crd.Name, "the compiled policy's name would be too long"})
		default:
			out = append(out, ScaledResource{CRD: crd.Name, Resource: schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}, Path: paths[0]})
		}
	}
	slices.SortFunc(out, func(a, b ScaledResource) int { return strings.Compare(a.CRD, b.CRD) })
	slices.SortFunc(left, func(a, b NotCompiled) int { return strings.Compare(a.CRD, b.CRD) })
	return out, left
}

// celIdentifier is a field name CEL reads as it is written.
var celIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celReserved are CEL's reserved words: the API server escapes such a
// field name (__in__), as it does names holding "__", "-", "." or "/"; a
// path is compiled only when each name is read as written, so that the
// policy cannot read another field than the webhook does.
var celReserved = []string{"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
	"if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"}

// celPath says why a specReplicasPath cannot be read in CEL as the
// webhook reads it (nil: it can). The API server allows only a simple
// path under .spec (no array notation).
func celPath(path string) error {
	fields := strings.Split(strings.TrimPrefix(path, "."), ".")
	if !strings.HasPrefix(path, ".") || len(fields) < 2 || fields[0] != "spec" {
		return fmt.Errorf("not a path under .spec")
	}
	for _, f := range fields {
		if !celIdentifier.MatchString(f) || strings.Contains(f, "__") || slices.Contains(celReserved, f) {
			return fmt.Errorf("field name %q is escaped in CEL (only letters, digits and single underscores, not a CEL reserved word, are compiled)", f)
		}
	}
	return nil
}
