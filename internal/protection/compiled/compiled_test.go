package compiled_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	"github.com/rampart-io/rampart/internal/protection/policy"
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
	widgets     = compiledtest.Kinds[compiledtest.Widgets.Resource]
	resourceOf  = map[schema.GroupVersionKind]string{
		configMaps: "configmaps", namespaces: "namespaces", deployments: "deployments",
		statefulSet: "statefulsets", daemonSets: "daemonsets", rcs: "replicationcontrollers",
		crds: "customresourcedefinitions", widgets: "widgets",
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
		// A custom resource's replicas, at its CRD's path.
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:        []v1alpha1.ResourceRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}},
			ObjectSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "core"}},
			ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardDecrease},
			Exempt:           v1alpha1.Subjects{Users: []string{"dba"}},
		},
	},
	{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-trial"},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:        []v1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"widgets"}}},
			ObjectSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "trial"}},
			ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardToZero},
			Mode:             v1alpha1.ModeWarn,
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

var tableOptions = compiled.Options{OwnNamespace: own, ReplicasExempt: v1alpha1.Subjects{Users: []string{"autoscaler-bot"}},
	Scaled: []compiled.ScaledResource{compiledtest.Widgets}}

// webhooks is what Rampart's webhooks answer for the same request: the
// manager's own handlers (admission.Deletion, admission.Replicas), called
// as the API server calls them: through the label webhook, and through
// the webhook of each policy whose resources and selectors reach the
// object before or after the write (Rampart's namespace is never
// reached). The cluster holds nothing else: what needs state has nothing
// to find.
func webhooks(t *testing.T, r compiledtest.Request, policies []v1alpha1.ProtectionPolicy, o compiled.Options, nsByName map[string]*corev1.Namespace) compiledtest.Outcome {
	t.Helper()
	if r.Namespace == o.OwnNamespace {
		return compiledtest.Outcome{}
	}
	gr := r.GVR.GroupResource()
	raw := func(obj map[string]any) runtime.RawExtension {
		if obj == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	req := ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "review", Kind: metav1.GroupVersionKind(r.GVK), Resource: metav1.GroupVersionResource(r.GVR),
		Namespace: r.Namespace, Name: r.Name, Operation: admissionv1.Operation(r.Op),
		UserInfo:  authenticationv1.UserInfo{Username: r.User.GetName(), Groups: r.User.GetGroups()},
		OldObject: raw(r.Old), Object: raw(r.Obj),
	}}
	var handler ctrladmission.Handler
	var purpose policy.Purpose
	switch r.Op {
	case admission.Delete:
		handler, purpose = &rampartadmission.Deletion{View: emptyCluster{}, Policies: rampartadmission.PolicyList(policies)}, policy.Protecting
	case admission.Update:
		handler, purpose = &rampartadmission.Replicas{View: emptyCluster{}, Policies: rampartadmission.PolicyList(policies), Exempt: o.ReplicasExempt}, policy.Guarding
	default:
		t.Fatalf("no webhook for %s", r.Op)
	}
	var nsLabels map[string]string
	if r.Namespace != "" {
		nsLabels = nsByName[r.Namespace].Labels
	}
	objLabels := []map[string]string{(&unstructured.Unstructured{Object: r.Old}).GetLabels()}
	if r.Obj != nil {
		objLabels = append(objLabels, (&unstructured.Unstructured{Object: r.Obj}).GetLabels())
	}
	// The label webhook: its handler judges by the labels, and admits
	// what carries none.
	answers := []ctrladmission.Response{handler.Handle(context.Background(), req)}
	for i := range policies {
		p := &policies[i]
		reached := false
		for _, l := range objLabels {
			reached = reached || (purpose(p) && policy.Covers(p, gr, nsLabels, l))
		}
		if reached {
			answers = append(answers, handler.Handle(throughPolicy(p.Name), req))
		}
	}
	var out compiledtest.Outcome
	for _, a := range answers {
		switch {
		case !a.Allowed && !out.Denied:
			out.Denied, out.Message = true, a.Result.Message
		case a.Allowed:
			out.Warnings = append(out.Warnings, a.Warnings...)
		}
	}
	if out.Denied {
		out.Warnings = nil
	}
	return out
}

// throughPolicy is the context of a request that came through a policy's
// webhook, as the manager's server builds it from the path.
func throughPolicy(name string) context.Context {
	return rampartadmission.PolicyFromPath("/policy/")(context.Background(), &http.Request{URL: &url.URL{Path: "/policy/" + name}})
}

// emptyCluster is the handlers' view of a cluster holding nothing but the
// request's object: nothing to cascade to, built-in kinds and the CRD of
// compiledtest.Widgets.
type emptyCluster struct{}

func (emptyCluster) LivePods(string) deletion.Sample         { return deletion.Sample{} }
func (emptyCluster) BoundClaims(string) deletion.Sample      { return deletion.Sample{} }
func (emptyCluster) ScaledWorkloads(string) deletion.Sample  { return deletion.Sample{} }
func (emptyCluster) ProtectedObjects(string) deletion.Sample { return deletion.Sample{} }
func (emptyCluster) CustomResources(string) deletion.Sample  { return deletion.Sample{} }
func (emptyCluster) Dependents(types.UID) deletion.Sample    { return deletion.Sample{} }
func (emptyCluster) LivePodsOf(types.UID) deletion.Sample    { return deletion.Sample{} }
func (emptyCluster) HasSynced() bool                         { return true }
func (emptyCluster) ScaleReplicasPath(gr schema.GroupResource) (string, bool) {
	return compiledtest.Widgets.Path, gr == compiledtest.Widgets.Resource
}
func (emptyCluster) WorkloadLabels(schema.GroupResource, string, string) (map[string]string, types.UID, bool) {
	return nil, "", false
}
func (emptyCluster) NamespaceLabels(string) (map[string]string, bool) { return nil, false }

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

func update(gvk schema.GroupVersionKind, ns, name string, oldLabels, newLabels map[string]string, from, to any, confirm string, u user.Info) compiledtest.Request {
	var ann map[string]string
	if confirm != "" {
		ann = map[string]string{v1alpha1.AnnotationConfirmReplicas: confirm}
	}
	gvr := gvk.GroupVersion().WithResource(resourceOf[gvk])
	path := compiledtest.ReplicasPath(gvr.GroupResource())
	return compiledtest.Request{Op: admission.Update, GVK: gvk, GVR: gvr, Namespace: ns, Name: name,
		Old: compiledtest.ObjectAt(gvk, path, ns, name, oldLabels, from, nil), Obj: compiledtest.ObjectAt(gvk, path, ns, name, newLabels, to, ann), User: u}
}

var (
	always   = map[string]string{v1alpha1.LabelProtection: string(v1alpha1.ProtectionAlways)}
	cascade  = map[string]string{v1alpha1.LabelProtection: string(v1alpha1.ProtectionCascading)}
	explicit = map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
	db       = map[string]string{"tier": "db"}
	core     = map[string]string{"fleet": "core"}
	trial    = map[string]string{"fleet": "trial"}
)

func withExplicit(l map[string]string) map[string]string {
	out := map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
	for k, v := range l {
		out[k] = v
	}
	return out
}

// TestBothEnginesAgree runs requests through the manager's webhook
// handlers (policies, selectors, exemptions, Warn mode, Rampart's
// namespace) and through the compiled policies evaluated by the API
// server's own libraries: the same requests are refused, with the same
// message, and the same are admitted or warned about.
func TestBothEnginesAgree(t *testing.T) {
	api := compiledtest.NewAPIServer(t, cluster...)
	policies, _ := compiled.Compile(tablePolicies, tableOptions)
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
		// Replicas of a custom resource, at its CRD's path (.spec.size).
		{name: "custom resource: unconfirmed change", req: update(widgets, "lab", "w", explicit, explicit, 3, 0, "", admin), denied: true},
		{name: "custom resource: confirmed change", req: update(widgets, "lab", "w", explicit, explicit, 3, 0, "0", admin)},
		{name: "custom resource: wrong confirmation", req: update(widgets, "lab", "w", explicit, explicit, 3, 4, "3", admin), denied: true},
		{name: "custom resource: label removed in the same write", req: update(widgets, "lab", "w", explicit, nil, 3, 0, "", admin), denied: true},
		{name: "custom resource: unlabelled", req: update(widgets, "lab", "w", nil, nil, 3, 0, "", admin)},
		{name: "custom resource: exempt from the label", req: update(widgets, "lab", "w", explicit, explicit, 3, 0, "", hpa)},
		{name: "custom resource: in Rampart's namespace", req: update(widgets, own, "w", explicit, explicit, 3, 0, "", admin)},
		{name: "custom resource: no spec before reads as 1", req: update(widgets, "lab", "w", explicit, explicit, nil, int64(0), "", admin), denied: true},
		{name: "custom resource: no spec after reads as 1", req: update(widgets, "lab", "w", explicit, explicit, int64(1), nil, "", admin)},
		{name: "custom resource: a size that is no integer reads as 1", req: update(widgets, "lab", "w", explicit, explicit, "3", int64(1), "", admin)},
		{name: "custom resource: a policy's Decrease guard", req: update(widgets, "shop", "w", core, core, 3, 2, "", admin), denied: true},
		{name: "custom resource: a policy's Decrease guard, an increase", req: update(widgets, "shop", "w", core, core, 3, 4, "", admin)},
		{name: "custom resource: a policy's exempt user", req: update(widgets, "shop", "w", core, core, 3, 2, "", &user.DefaultInfo{Name: "dba"})},
		{name: "custom resource: selected only after the write", req: update(widgets, "shop", "w", nil, core, 3, 2, "", admin)},
		{name: "custom resource: a Warn-mode policy warns", req: update(widgets, "shop", "w", trial, trial, 3, 0, "", admin), warned: true},
		{name: "custom resource: label and Warn-mode policy: the label denies", req: update(widgets, "shop", "w", withExplicit(trial), withExplicit(trial), 3, 0, "", admin), denied: true},
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
	all, left := compiled.Compile(tablePolicies, tableOptions)
	if len(left) > 0 {
		t.Errorf("left to the webhooks for their names: %+v", left)
	}
	for _, p := range all {
		names = append(names, p.Policy.Name)
		if p.Binding.Name != p.Policy.Name || p.Binding.Spec.PolicyName != p.Policy.Name {
			t.Errorf("%s: binding %s for policy %s", p.Policy.Name, p.Binding.Name, p.Binding.Spec.PolicyName)
		}
		if p.Policy.Labels[compiled.LabelManagedBy] != compiled.ManagedBy || p.Binding.Labels[compiled.LabelManagedBy] != compiled.ManagedBy {
			t.Errorf("%s: not labelled as Rampart's", p.Policy.Name)
		}
	}
	want := []string{compiled.LabelDeletionName, compiled.LabelReplicasName, compiled.SavedPodsName, "widgets.example.com.replicas.rampart.io",
		compiled.DeletionName("pay-config"), compiled.DeletionName("databases"), compiled.ReplicasName("databases"), compiled.ReplicasName("no-zero"), compiled.DeletionName("try-out"),
		"fleet.replicas.widgets.example.com.policy.rampart.io", "fleet-trial.replicas.widgets.example.com.policy.rampart.io"}
	if !slices.Equal(names, want) {
		t.Errorf("compiled %v, want %v (Cascading is never compiled)", names, want)
	}
}
