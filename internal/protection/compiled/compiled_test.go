package compiled_test

import (
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/replicas"
)

const own = "rampart-system"

var (
	configMaps  = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	namespaces  = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	deployments = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	statefulSet = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	daemonSets  = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}
	rcs         = schema.GroupVersionKind{Version: "v1", Kind: "ReplicationController"}
	crds        = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	resourceOf  = map[schema.GroupVersionKind]string{
		configMaps: "configmaps", namespaces: "namespaces", deployments: "deployments",
		statefulSet: "statefulsets", daemonSets: "daemonsets", rcs: "replicationcontrollers",
		crds: "customresourcedefinitions",
	}
	cluster = []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "pay"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lab"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "prod"}},
		{ObjectMeta: metav1.ObjectMeta{Name: own}},
	}
	admin = &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated", "sre"}}
	bot   = &user.DefaultInfo{Name: "system:serviceaccount:ci:deployer", Groups: []string{"system:serviceaccounts"}}
	hpa   = &user.DefaultInfo{Name: "autoscaler-bot", Groups: []string{"system:authenticated"}}
)

// The policies of the decision tables.
var tablePolicies = []v1alpha1.ProtectionPolicy{
	{
		ObjectMeta: metav1.ObjectMeta{Name: "pay-config"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "pay"}},
			Protection:        v1alpha1.ProtectionAlways,
			Exempt: v1alpha1.Subjects{Groups: []string{"release-managers"},
				ServiceAccounts: []v1alpha1.ServiceAccountRef{{Namespace: "ci", Name: "deployer"}}},
		},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "databases"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources: []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"*"}}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"db"}},
				{Key: "scratch", Operator: metav1.LabelSelectorOpDoesNotExist},
			}},
			Protection:       v1alpha1.ProtectionAlways,
			ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardDecrease},
			Exempt:           v1alpha1.Subjects{Users: []string{"dba"}},
		},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "no-zero"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{"", "apps"}, Resources: []string{"replicationcontrollers", "deployments", "daemonsets"}}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{"lab"}}}},
			ExplicitReplicas:  &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardToZero},
		},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "try-out"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:      []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"trial": "yes"}},
			Protection:     v1alpha1.ProtectionAlways,
			Mode:           v1alpha1.ModeWarn,
		},
	},
	{
		// Cascading needs state: nothing of it is compiled.
		ObjectMeta: metav1.ObjectMeta{Name: "careful"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:      []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"careful": "yes"}},
			Protection:     v1alpha1.ProtectionCascading,
		},
	},
}

var tableOptions = compiled.Options{OwnNamespace: own, ReplicasExempt: v1alpha1.Subjects{Users: []string{"autoscaler-bot"}}}

// webhooks is what Rampart's webhooks answer for the same request: the Go
// decisions (deletion.Decide, replicas.Decide), reached as the webhook
// configuration reaches them (Rampart's namespace left out, each policy's
// resources and selectors, the object before the write, exemptions).
func webhooks(t *testing.T, r compiledtest.Request, policies []v1alpha1.ProtectionPolicy, o compiled.Options, nsByName map[string]*corev1.Namespace) compiledtest.Outcome {
	t.Helper()
	if r.Namespace == o.OwnNamespace {
		return compiledtest.Outcome{}
	}
	gr := r.GVR.GroupResource()
	old := &unstructured.Unstructured{Object: r.Old}
	var nsLabels map[string]string
	if r.Namespace != "" {
		nsLabels = nsByName[r.Namespace].Labels
	}
	// The webhook names a deleted object from the old object: an item of
	// a DeleteCollection comes with the collection's request, no name.
	obj := protection.Object{Resource: gr, Namespace: old.GetNamespace(), Name: old.GetName()}
	if gr.Group == "" {
		obj.Singular = lower(r.GVK.Kind)
	}
	u := authenticationv1.UserInfo{Username: r.User.GetName(), Groups: r.User.GetGroups()}
	var out compiledtest.Outcome
	decide := func(v protection.Verdict, enforce bool) {
		switch {
		case v.Allowed:
		case !enforce:
			out.Warnings = append(out.Warnings, "rampart (Warn mode): "+v.Message)
		case !out.Denied:
			out.Denied, out.Message = true, v.Message
		}
	}
	covering := func(purpose policy.Purpose) []*v1alpha1.ProtectionPolicy {
		var ps []*v1alpha1.ProtectionPolicy
		for _, p := range policy.Select(policies, purpose, gr, nsLabels, old.GetLabels()) {
			if !protection.Names(p.Spec.Exempt, u) {
				ps = append(ps, p)
			}
		}
		return ps
	}
	switch r.Op {
	case admission.Delete:
		if v1alpha1.ProtectionLevel(old.GetLabels()[v1alpha1.LabelProtection]) == v1alpha1.ProtectionAlways {
			decide(deletion.Decide(deletion.Request{Object: obj, Level: v1alpha1.ProtectionAlways}, nil), true)
		}
		for _, p := range covering(policy.Protecting) {
			if p.Spec.Protection != v1alpha1.ProtectionAlways {
				continue // Cascading needs the cluster's state: the webhook's alone
			}
			decide(deletion.Decide(deletion.Request{Object: obj, Level: p.Spec.Protection, Source: protection.Source{Policy: p.Name}}, nil), policy.Enforced(p))
		}
	case admission.Update:
		if !compiled.StaticReplicas(gr) {
			return out
		}
		cur := &unstructured.Unstructured{Object: r.Obj}
		base := replicas.Request{Object: obj, Old: replicasOf(old), New: replicasOf(cur),
			Confirm: cur.GetAnnotations()[v1alpha1.AnnotationConfirmReplicas]}
		if old.GetLabels()[v1alpha1.LabelExplicitReplicas] == "true" || cur.GetLabels()[v1alpha1.LabelExplicitReplicas] == "true" {
			req := base
			req.Guard, req.Exempt = v1alpha1.GuardAll, protection.Names(o.ReplicasExempt, u)
			decide(replicas.Decide(req), true)
		}
		for _, p := range covering(policy.Guarding) {
			req := base
			req.Guard, req.Source = policy.Guard(p), protection.Source{Policy: p.Name}
			decide(replicas.Decide(req), policy.Enforced(p))
		}
	}
	if out.Denied {
		out.Warnings = nil
	}
	return out
}

func replicasOf(u *unstructured.Unstructured) int64 {
	n, found, err := unstructured.NestedInt64(u.Object, "spec", "replicas")
	if err != nil || !found {
		return 1
	}
	return n
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func del(gvk schema.GroupVersionKind, ns, name string, labels map[string]string, u user.Info) compiledtest.Request {
	objNs := ns
	if gvk == namespaces {
		objNs = ""
	}
	return compiledtest.Request{Op: admission.Delete, GVK: gvk, GVR: gvk.GroupVersion().WithResource(resourceOf[gvk]), Namespace: ns, Name: name,
		Old: compiledtest.Object(gvk, objNs, name, labels, nil, nil), User: u}
}

// collectionItem is r as an item of a DeleteCollection: the API server
// judges each item with the collection's request, which names no object
// (a namespaced resource has no DeleteCollection across all namespaces:
// the namespace is always there).
func collectionItem(r compiledtest.Request) compiledtest.Request {
	r.Name = ""
	return r
}

func update(gvk schema.GroupVersionKind, ns, name string, oldLabels, newLabels map[string]string, from, to int64, confirm string, u user.Info) compiledtest.Request {
	var ann map[string]string
	if confirm != "" {
		ann = map[string]string{v1alpha1.AnnotationConfirmReplicas: confirm}
	}
	return compiledtest.Request{Op: admission.Update, GVK: gvk, GVR: gvk.GroupVersion().WithResource(resourceOf[gvk]), Namespace: ns, Name: name,
		Old: compiledtest.Object(gvk, ns, name, oldLabels, from, nil), Obj: compiledtest.Object(gvk, ns, name, newLabels, to, ann), User: u}
}

var (
	always   = map[string]string{v1alpha1.LabelProtection: string(v1alpha1.ProtectionAlways)}
	cascade  = map[string]string{v1alpha1.LabelProtection: string(v1alpha1.ProtectionCascading)}
	explicit = map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
	db       = map[string]string{"tier": "db"}
)

// TestBothEnginesAgree runs the deletion and replica decision tables
// through the Go decisions and through the compiled policies evaluated by
// the API server's own libraries: the same requests are refused, with the
// same message, and the same are admitted or warned about.
func TestBothEnginesAgree(t *testing.T) {
	api := compiledtest.NewAPIServer(t, cluster...)
	policies := compiled.Compile(tablePolicies, tableOptions)
	tests := []struct {
		name   string
		req    compiledtest.Request
		denied bool
		warned bool
	}{
		// Deletion: the label.
		{name: "Always-labelled configmap", req: del(configMaps, "lab", "settings", always, admin), denied: true},
		// A request about a Namespace carries its name as its namespace.
		{name: "Always-labelled namespace (named by kind)", req: del(namespaces, "prod", "prod", always, admin), denied: true},
		{name: "Always-labelled deployment (group-qualified)", req: del(deployments, "lab", "web", always, admin), denied: true},
		{name: "unlabelled configmap", req: del(configMaps, "lab", "settings", nil, admin)},
		{name: "Always-labelled cluster-scoped object (no namespace in the request)", req: del(crds, "", "widgets.example.com", always, admin), denied: true},
		{name: "an item of a DeleteCollection (no name in the request)", req: collectionItem(del(configMaps, "lab", "settings", always, admin)), denied: true},
		{name: "Cascading label is the webhook's, not compiled", req: del(configMaps, "lab", "settings", cascade, admin)},
		{name: "other values of the label", req: del(configMaps, "lab", "settings", map[string]string{v1alpha1.LabelProtection: "always"}, admin)},
		{name: "Rampart's own namespace is never reached", req: del(configMaps, own, "settings", always, admin)},
		// Deletion: policies.
		{name: "policy by namespace selector", req: del(configMaps, "shop", "prices", nil, admin), denied: true},
		{name: "policy: namespace not selected", req: del(configMaps, "lab", "prices", nil, admin)},
		{name: "policy: exempt group", req: del(configMaps, "shop", "prices", nil, &user.DefaultInfo{Name: "bob", Groups: []string{"release-managers"}})},
		{name: "policy: exempt service account", req: del(configMaps, "shop", "prices", nil, bot)},
		{name: "policy exemption does not lift the label", req: del(configMaps, "shop", "prices", always, bot), denied: true},
		{name: "policy by object selector", req: del(deployments, "lab", "pg", db, admin), denied: true},
		{name: "policy: object not selected (DoesNotExist)", req: del(deployments, "lab", "pg", map[string]string{"tier": "db", "scratch": "1"}, admin)},
		{name: "policy: exempt user", req: del(deployments, "lab", "pg", db, &user.DefaultInfo{Name: "dba"})},
		{name: "policy: resource not named", req: del(configMaps, "lab", "pg", db, admin)},
		{name: "Warn-mode policy warns", req: del(configMaps, "lab", "feature", map[string]string{"trial": "yes"}, admin), warned: true},
		{name: "Cascading policy is the webhook's, not compiled", req: del(configMaps, "lab", "x", map[string]string{"careful": "yes"}, admin)},
		// Replicas: the label.
		{name: "unconfirmed change", req: update(deployments, "lab", "web", explicit, explicit, 3, 0, "", admin), denied: true},
		{name: "confirmed change", req: update(deployments, "lab", "web", explicit, explicit, 3, 0, "0", admin)},
		{name: "wrong confirmation", req: update(deployments, "lab", "web", explicit, explicit, 3, 0, "5", admin), denied: true},
		{name: "no change", req: update(deployments, "lab", "web", explicit, explicit, 3, 3, "", admin)},
		{name: "label removed in the same write", req: update(deployments, "lab", "web", explicit, nil, 3, 0, "", admin), denied: true},
		{name: "label added in the same write", req: update(deployments, "lab", "web", nil, explicit, 3, 0, "", admin), denied: true},
		{name: "exempt from the label (--replicas-exempt-users)", req: update(deployments, "shop", "web", explicit, explicit, 3, 0, "", hpa)},
		{name: "replication controller (core, named by kind)", req: update(rcs, "shop", "old", explicit, explicit, 2, 1, "", admin), denied: true},
		{name: "a daemonset has no replicas", req: update(daemonSets, "lab", "agent", explicit, explicit, 0, 0, "", admin)},
		{name: "unlabelled workload", req: update(deployments, "shop", "web", nil, nil, 3, 0, "", admin)},
		{name: "replicas label in Rampart's namespace", req: update(deployments, own, "web", explicit, explicit, 3, 0, "", admin)},
		// Replicas: policies.
		{name: "Decrease guard: a decrease", req: update(statefulSet, "shop", "pg", db, db, 3, 1, "", admin), denied: true},
		{name: "Decrease guard: an increase", req: update(statefulSet, "shop", "pg", db, db, 3, 5, "", admin)},
		{name: "Decrease guard: confirmed", req: update(statefulSet, "shop", "pg", db, db, 3, 1, "1", admin)},
		{name: "policy: selected only after the write", req: update(statefulSet, "shop", "pg", nil, db, 3, 1, "", admin)},
		{name: "policy: selected only before the write", req: update(statefulSet, "shop", "pg", db, nil, 3, 1, "", admin), denied: true},
		{name: "policy: exempt user", req: update(statefulSet, "shop", "pg", db, db, 3, 1, "", &user.DefaultInfo{Name: "dba"})},
		{name: "ToZero guard: to zero", req: update(rcs, "lab", "legacy", nil, nil, 2, 0, "", admin), denied: true},
		{name: "ToZero guard: to one", req: update(rcs, "lab", "legacy", nil, nil, 2, 1, "", admin)},
		{name: "ToZero guard: namespace not selected", req: update(deployments, "shop", "web", nil, nil, 2, 0, "", admin)},
		{name: "label and policy: the label denies first", req: update(deployments, "lab", "web", explicit, explicit, 2, 0, "", admin), denied: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := webhooks(t, tt.req, tablePolicies, tableOptions, api.Namespaces)
			got := api.Admit(t, policies, tt.req.Attributes())
			if want.Denied != tt.denied || (len(want.Warnings) > 0) != tt.warned {
				t.Fatalf("the table says denied=%v warned=%v; the Go decision: %s", tt.denied, tt.warned, want)
			}
			if got.Denied != want.Denied || got.Message != want.Message {
				t.Fatalf("the engines disagree:\n  Go decision:   %s\n  compiled CEL:  %s", want, got)
			}
			if len(got.Warnings) != len(want.Warnings) {
				t.Fatalf("warnings differ:\n  Go decision:   %q\n  compiled CEL:  %q", want.Warnings, got.Warnings)
			}
			for i := range got.Warnings {
				if got.Warnings[i] != want.Warnings[i] {
					t.Fatalf("warnings differ:\n  Go decision:   %q\n  compiled CEL:  %q", want.Warnings[i], got.Warnings[i])
				}
			}
		})
	}
}

// TestCompiledShapes checks what is compiled and what is left to the
// webhooks, by name.
func TestCompiledShapes(t *testing.T) {
	var names []string
	for _, p := range compiled.Compile(tablePolicies, tableOptions) {
		names = append(names, p.Policy.Name)
		if p.Binding.Name != p.Policy.Name || p.Binding.Spec.PolicyName != p.Policy.Name {
			t.Errorf("%s: binding %s for policy %s", p.Policy.Name, p.Binding.Name, p.Binding.Spec.PolicyName)
		}
		if p.Policy.Labels[compiled.LabelManagedBy] != compiled.ManagedBy || p.Binding.Labels[compiled.LabelManagedBy] != compiled.ManagedBy {
			t.Errorf("%s: not labelled as Rampart's", p.Policy.Name)
		}
	}
	want := []string{compiled.LabelDeletionName, compiled.LabelReplicasName,
		compiled.DeletionName("pay-config"), compiled.DeletionName("databases"), compiled.ReplicasName("databases"), compiled.ReplicasName("no-zero"), compiled.DeletionName("try-out")}
	if !slices.Equal(names, want) {
		t.Errorf("compiled %v, want %v (Cascading is never compiled)", names, want)
	}
}
