// Package compiledtest evaluates compiled policies in process as
// kube-apiserver's ValidatingAdmissionPolicy plugin does, with its own
// libraries, so that the Go decisions' tests can run each row through the
// compiled CEL too (one meaning, two engines). For tests only.
package compiledtest

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// APIServer evaluates compiled policies as kube-apiserver's
// ValidatingAdmissionPolicy plugin does, with its own libraries: the
// matcher (resource rules, namespace and object selectors), the CEL
// compiler and environment, and the validator (match conditions,
// variables, validations, message expressions). Only the plumbing that
// loads policies from informers and dispatches is left out.
type APIServer struct {
	matcher generic.PolicyMatcher
	// Namespaces are the cluster's namespaces by name, labelled as the
	// API server labels them.
	Namespaces map[string]*corev1.Namespace
	ifaces     admission.ObjectInterfaces
}

// NewAPIServer is an API server with these namespaces.
func NewAPIServer(t testing.TB, namespaces ...*corev1.Namespace) *APIServer {
	t.Helper()
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	byName := map[string]*corev1.Namespace{}
	for _, ns := range namespaces {
		ns = ns.DeepCopy()
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name // as the API server sets it
		if err := indexer.Add(ns); err != nil {
			t.Fatal(err)
		}
		byName[ns.Name] = ns
	}
	m := matching.NewMatcher(listersv1.NewNamespaceLister(indexer), fake.NewClientset())
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return &APIServer{matcher: generic.NewPolicyMatcher(m), Namespaces: byName, ifaces: admission.NewObjectInterfacesFromScheme(scheme)}
}

// compile is the plugin's compilePolicy, which is not exported.
func compile(p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	vars := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	exprVars := plugincel.OptionalVariableDeclarations{}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, p.Spec.FailurePolicy, err)
	}
	named := make([]plugincel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		named[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		conds := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			conds[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conds, vars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, vars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(nil, vars, environment.StoredExpressions),
		compiler.CompileCondition(messages, exprVars, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

// Outcome is what a client sees of one request: refused with a message,
// or admitted with warnings.
type Outcome struct {
	Denied   bool
	Message  string
	Warnings []string
}

// Admit runs a request through every compiled policy, as the API server
// would, and says what the client sees.
func (s *APIServer) Admit(t testing.TB, policies []compiled.Policy, a admission.Attributes) Outcome {
	t.Helper()
	return s.Load(t, policies).Admit(t, a)
}

// Loaded are compiled policies as the API server holds them once loaded:
// CEL compiled, ready to judge requests (for benchmarks: Admit compiles
// each time).
type Loaded struct {
	server     *APIServer
	policies   []compiled.Policy
	validators []validating.Validator
}

// Load compiles the policies' CEL as the API server does when it loads
// them, and fails t on a compile error.
func (s *APIServer) Load(t testing.TB, policies []compiled.Policy) *Loaded {
	t.Helper()
	l := &Loaded{server: s, policies: policies}
	for _, p := range policies {
		v := compile(p.Policy)
		if err := v.CompileError(); err != nil {
			t.Fatalf("%s: %v", p.Policy.Name, err)
		}
		l.validators = append(l.validators, v)
	}
	return l
}

// Admit runs a request through the loaded policies and says what the
// client sees.
func (l *Loaded) Admit(t testing.TB, a admission.Attributes) Outcome {
	t.Helper()
	s := l.server
	var out Outcome
	for i, p := range l.policies {
		ok, gvr, gvk, err := s.matcher.DefinitionMatches(a, s.ifaces, validating.NewValidatingAdmissionPolicyAccessor(p.Policy))
		if err != nil {
			t.Fatalf("%s: matching: %v", p.Policy.Name, err)
		}
		if !ok {
			continue
		}
		if ok, err := s.matcher.BindingMatches(a, s.ifaces, validating.NewValidatingAdmissionPolicyBindingAccessor(p.Binding)); err != nil || !ok {
			t.Fatalf("%s: the binding does not match what its policy matches (%v)", p.Policy.Name, err)
		}
		va := &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(a.GetObject()), VersionedOldObject: admission.NewLazyObject(a.GetOldObject())}
		res := l.validators[i].Validate(context.Background(), gvr, va, nil, s.Namespaces[a.GetNamespace()], celconfig.RuntimeCELCostBudget, nil)
		for _, d := range res.Decisions {
			if d.Evaluation == validating.EvalError {
				t.Fatalf("%s: evaluation error: %s", p.Policy.Name, d.Message)
			}
			if d.Action != validating.ActionDeny {
				continue
			}
			if d.Reason != metav1.StatusReasonForbidden {
				t.Errorf("%s: reason %q, want Forbidden (the webhook's 403)", p.Policy.Name, d.Reason)
			}
			for _, action := range p.Binding.Spec.ValidationActions {
				switch action {
				case admissionregistrationv1.Deny:
					if !out.Denied {
						out.Denied, out.Message = true, d.Message
					}
				case admissionregistrationv1.Warn:
					out.Warnings = append(out.Warnings, d.Message)
				}
			}
		}
	}
	if out.Denied {
		out.Warnings = nil
	}
	return out
}

// Request is one request as both engines see it.
type Request struct {
	Op        admission.Operation
	GVK       schema.GroupVersionKind
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
	// Subresource is "scale" for a write through the scale subresource.
	Subresource string
	// Old and Obj are the object before and after (Old only for DELETE).
	Old, Obj map[string]any
	User     user.Info
}

// Attributes are the request as admission plugins see it.
func (r Request) Attributes() admission.Attributes {
	var obj, old runtime.Object
	if r.Obj != nil {
		obj = &unstructured.Unstructured{Object: r.Obj}
	}
	if r.Old != nil {
		old = &unstructured.Unstructured{Object: r.Old}
	}
	return admission.NewAttributesRecord(obj, old, r.GVK, r.Namespace, r.Name, r.GVR, r.Subresource, r.Op, nil, false, r.User)
}

// Object is a minimal object of kind gvk; replicas nil leaves spec out.
func Object(gvk schema.GroupVersionKind, ns, name string, labels map[string]string, replicas any, annotations map[string]string) map[string]any {
	return ObjectAt(gvk, ".spec.replicas", ns, name, labels, replicas, annotations)
}

// ObjectAt is Object with the replicas at path (a CRD's
// specReplicasPath); replicas nil leaves spec out.
func ObjectAt(gvk schema.GroupVersionKind, path, ns, name string, labels map[string]string, replicas any, annotations map[string]string) map[string]any {
	meta := map[string]any{"name": name}
	if ns != "" {
		meta["namespace"] = ns
	}
	if labels != nil {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		meta["labels"] = l
	}
	if annotations != nil {
		a := map[string]any{}
		for k, v := range annotations {
			a[k] = v
		}
		meta["annotations"] = a
	}
	o := map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "metadata": meta}
	if replicas != nil {
		if n, ok := replicas.(int); ok {
			replicas = int64(n) // as decoded from JSON
		}
		if err := unstructured.SetNestedField(o, replicas, strings.Split(strings.TrimPrefix(path, "."), ".")...); err != nil {
			panic(err) // a test's path
		}
	}
	return o
}

// Widgets is the custom resource of the tables: its CRD has a scale
// subresource whose replicas are at .spec.size.
var Widgets = compiled.ScaledResource{CRD: "widgets.example.com", Resource: schema.GroupResource{Group: "example.com", Resource: "widgets"}, Path: ".spec.size"}

// ReplicasPath is where the tables' kinds keep their replicas.
func ReplicasPath(gr schema.GroupResource) string {
	if gr == Widgets.Resource {
		return Widgets.Path
	}
	return ".spec.replicas"
}

func (o Outcome) String() string {
	if o.Denied {
		return "denied: " + o.Message
	}
	if len(o.Warnings) > 0 {
		return "admitted with warnings: " + strings.Join(o.Warnings, " | ")
	}
	return "admitted"
}

// Kinds are the kinds of the resources Rampart's tables use, as the API
// server names them in a request.
var Kinds = map[schema.GroupResource]schema.GroupVersionKind{
	{Resource: "namespaces"}:                                               {Version: "v1", Kind: "Namespace"},
	{Resource: "configmaps"}:                                               {Version: "v1", Kind: "ConfigMap"},
	{Resource: "replicationcontrollers"}:                                   {Version: "v1", Kind: "ReplicationController"},
	{Group: "apps", Resource: "deployments"}:                               {Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Resource: "replicasets"}:                               {Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	{Group: "apps", Resource: "statefulsets"}:                              {Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Resource: "daemonsets"}:                                {Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: {Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
	Widgets.Resource:                                                       {Group: "example.com", Version: "v1", Kind: "Widget"},
}

// For is a request of op on the object of resource gr in namespace ns
// (the namespace's own name for a Namespace), by the user named who.
func For(t testing.TB, op admission.Operation, gr schema.GroupResource, ns, name, who string) Request {
	t.Helper()
	gvk, ok := Kinds[gr]
	if !ok {
		t.Fatalf("no kind for %v: add it to compiledtest.Kinds", gr)
	}
	return Request{Op: op, GVK: gvk, GVR: gvk.GroupVersion().WithResource(gr.Resource), Namespace: ns, Name: name, User: &user.DefaultInfo{Name: who}}
}

// InNamespace is an API server holding only the namespace ns ("" none),
// enough for a request in it.
func InNamespace(t testing.TB, ns string) *APIServer {
	t.Helper()
	if ns == "" {
		return NewAPIServer(t)
	}
	return NewAPIServer(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
}

// SameVerdict fails t unless the compiled policies' outcome is the Go
// decision's: refused with the same message, or admitted.
func SameVerdict(t testing.TB, allowed bool, message string, got Outcome) {
	t.Helper()
	if got.Denied == allowed || got.Message != message {
		t.Errorf("the engines disagree:\n  Go decision:   allowed=%v %q\n  compiled CEL:  %s", allowed, message, got)
	}
}

// Left fails t if a compiled policy judged a request that needs the
// cluster's state (why), which only the webhook may decide.
func Left(t testing.TB, why string, got Outcome) {
	t.Helper()
	if got.Denied || len(got.Warnings) > 0 {
		t.Errorf("a compiled policy judged %s, which needs the cluster's state: %s", why, got)
	}
}
