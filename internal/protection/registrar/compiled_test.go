package registrar

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// The keeper sees drift by comparing what it asked for with what the API
// server holds, which adds defaults: those must not read as drift, while
// any field changed or removed by hand must.
func TestDriftIgnoresDefaultsAndSeesEdits(t *testing.T) {
	want := compiled.LabelRules(compiled.Options{OwnNamespace: "rampart-system"})[0].Policy.Spec
	live := func(edit func(map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(specJSON(want)), &m); err != nil {
			t.Fatal(err)
		}
		// What the API server defaults in a stored policy.
		m["auditAnnotations"] = nil
		m["matchConstraints"].(map[string]any)["excludeResourceRules"] = nil
		if edit != nil {
			edit(m)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	if !covers(live(nil), want) {
		t.Error("the live policy with the API server's defaults reads as drift")
	}
	for name, edit := range map[string]func(map[string]any){
		"failure policy relaxed": func(m map[string]any) { m["failurePolicy"] = string(admissionregistrationv1.Ignore) },
		"validation removed":     func(m map[string]any) { m["validations"] = []any{} },
		"selector widened":       func(m map[string]any) { m["matchConstraints"].(map[string]any)["objectSelector"] = map[string]any{} },
	} {
		if covers(live(edit), want) {
			t.Errorf("%s: not seen as drift", name)
		}
	}
	if covers("", want) {
		t.Error("a missing policy is not drift")
	}
}

// A version names the rules as compiled: options that change what is
// enforced change it.
func TestHashFollowsTheRules(t *testing.T) {
	base := Hash(compiled.LabelRules(compiled.Options{OwnNamespace: "rampart-system"}))
	if base == "" || base != Hash(compiled.LabelRules(compiled.Options{OwnNamespace: "rampart-system"})) {
		t.Fatalf("hash %q is not stable", base)
	}
	exempt := compiled.Options{OwnNamespace: "rampart-system", ReplicasExempt: v1alpha1.Subjects{Users: []string{"autoscaler-bot"}}}
	if Hash(compiled.LabelRules(exempt)) == base {
		t.Error("a new replicas exemption leaves the version unchanged: the webhooks would stay narrowed to stale rules")
	}
	if Hash(nil) != "" {
		t.Error("no rules have a version")
	}
}

// What the manager compiles of a ProtectionPolicy, and how its Ready
// condition learns whether every API server enforces it: the record on
// the probe policy, by the policy's version.
func TestPolicyStateFollowsTheRecord(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	always := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		Protection: v1alpha1.ProtectionAlways}}
	cascading := always.DeepCopy()
	cascading.Spec.Protection = v1alpha1.ProtectionCascading
	warn := always.DeepCopy()
	warn.Spec.Mode = v1alpha1.ModeWarn
	opts := compiled.Options{OwnNamespace: "rampart-system"}
	if n := len(PolicyRules(always, opts)); n != 1 {
		t.Errorf("an Always policy compiles to %d policies, want 1", n)
	}
	if n := len(PolicyRules(cascading, opts)) + len(PolicyRules(warn, opts)); n != 0 {
		t.Errorf("Cascading and Warn-mode policies compile to %d policies, want none (the webhook judges them alone)", n)
	}

	record := func(r map[string]string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		raw, _ := json.Marshal(r)
		return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: probeName, Annotations: map[string]string{inForceAnnotation: string(raw)}}}
	}
	for _, tt := range []struct {
		name    string
		enabled bool
		policy  *v1alpha1.ProtectionPolicy
		probe   *admissionregistrationv1.ValidatingAdmissionPolicy
		names   int
		inForce bool
	}{
		{"compiling off", false, always, record(map[string]string{PolicyKey("ledger"): Hash(PolicyRules(always, opts))}), 0, false},
		{"nothing static", true, cascading, nil, 0, false},
		{"not proved yet", true, always, nil, 1, false},
		{"an older version proved", true, always, record(map[string]string{PolicyKey("ledger"): "0123456789abcdef"}), 1, false},
		{"in force", true, always, record(map[string]string{PolicyKey("ledger"): Hash(PolicyRules(always, opts))}), 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(s)
			if tt.probe != nil {
				b = b.WithObjects(tt.probe)
			}
			c := &Compiled{Client: b.Build(), Options: opts, Enabled: tt.enabled}
			st, err := c.PolicyState(context.Background(), tt.policy)
			if err != nil || len(st.Names) != tt.names || st.InForce != tt.inForce || len(st.Left) > 0 {
				t.Errorf("PolicyState = %+v, %v; want %d names, in force %v", st, err, tt.names, tt.inForce)
			}
			if tt.names == 1 && st.Names[0] != "ledger.deletion.policy.rampart.io" {
				t.Errorf("compiled policy %q, want the webhook's name", st.Names[0])
			}
		})
	}
}

// A ProtectionPolicy's compiled policy missing (just created) or stale
// (its policy deleted) is drift to repair, but not a reason to widen the
// label webhooks; a label rule's policy or binding missing is, but not
// that of a custom resource (the webhooks judge those anyway).
func TestDriftOfAPolicyLeavesTheLabelWebhooksNarrow(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	opts := compiled.Options{OwnNamespace: "rampart-system"}
	labels := compiled.LabelRules(opts)
	ledger := PolicyRules(&v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
		Protection: v1alpha1.ProtectionAlways}}, opts)
	applied := func(ps []compiled.Policy) *Compiled {
		b := fake.NewClientBuilder().WithScheme(s)
		for _, p := range ps {
			for _, obj := range []client.Object{p.Policy.DeepCopy(), p.Binding.DeepCopy()} {
				obj.GetLabels()[labelAppliedBy] = appliedBy
				b = b.WithObjects(obj)
			}
		}
		return &Compiled{Client: b.Build(), Options: opts, Enabled: true}
	}
	both := append(append([]compiled.Policy{}, labels...), ledger...)
	widgets := compiled.ScaledLabelRules(compiled.Options{OwnNamespace: "rampart-system", Scaled: []compiled.ScaledResource{{
		CRD: "widgets.example.com", Resource: schema.GroupResource{Group: "example.com", Resource: "widgets"}, Path: ".spec.size"}}})
	withWidgets := append(append([]compiled.Policy{}, both...), widgets...)
	for _, tt := range []struct {
		name           string
		have, want     []compiled.Policy
		anything, lbls bool
	}{
		{"in step", both, both, false, false},
		{"a new policy's not applied yet", labels, both, true, false},
		{"a deleted policy's still there", both, labels, true, false},
		{"a label rule's missing", append(append([]compiled.Policy{}, labels[1:]...), ledger...), both, true, true},
		{"a new CRD's label rule not applied yet", both, withWidgets, true, false},
		{"a deleted CRD's label rule still there", withWidgets, both, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			anything, lbls, err := applied(tt.have).drifted(context.Background(), tt.want)
			if err != nil || anything != tt.anything || lbls != tt.lbls {
				t.Errorf("drifted = %v, labels %v, %v; want %v, labels %v", anything, lbls, err, tt.anything, tt.lbls)
			}
		})
	}
}

// A replica whose cluster view is still loading writes no webhook
// configuration: written from half-filled views, it would narrow the scale
// and budget webhooks of every replica (a rolling upgrade's new replica).
func TestNoConfigurationFromViewsStillLoading(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	r := New(Config{Client: c, Reader: c})
	r.viewsSynced = func() bool { return false }
	if _, err := r.writeOnce(context.Background(), true); !errors.Is(err, errNotSynced) {
		t.Fatalf("write from loading views: %v, want errNotSynced", err)
	}
	var cfgs admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := c.List(context.Background(), &cfgs); err != nil || len(cfgs.Items) != 0 {
		t.Fatalf("configurations written: %d, %v", len(cfgs.Items), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := r.waitSynced(ctx); err == nil {
		t.Error("waitSynced returned before the views synced")
	}
}

// The custom resources with a scale subresource are compiled from the
// CRDs, each recorded apart from the label rules (a CRD coming or going
// leaves the label webhooks' version alone), and a policy covering one
// compiles its replicas there too.
func TestCustomResourcesCompiledFromTheCRDs(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	widgets := apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.size"}}}}}}
	fleet := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:        []v1alpha1.ResourceRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}},
		ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardAll}}}
	c := &Compiled{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(fleet).Build(), Options: compiled.Options{OwnNamespace: "rampart-system"}, Enabled: true,
		CRDs: func() ([]apiextensionsv1.CustomResourceDefinition, bool) {
			return []apiextensionsv1.CustomResourceDefinition{widgets}, true
		}}
	got, err := c.compile(context.Background(), c.Client, nil)
	if err != nil {
		t.Fatal(err)
	}
	record := got.record
	var names []string
	for _, p := range got.all {
		names = append(names, p.Policy.Name)
	}
	want := []string{compiled.LabelDeletionName, compiled.LabelReplicasName, compiled.SavedPodsName, "widgets.example.com.replicas.rampart.io", "fleet.replicas.widgets.example.com.policy.rampart.io"}
	if !slices.Equal(names, want) {
		t.Errorf("compiled %v, want %v", names, want)
	}
	if record[sourceLabels] != Hash(compiled.LabelRules(c.Options)) || record[CRDKey("widgets.example.com")] == "" || record[PolicyKey("fleet")] == "" {
		t.Errorf("record %v: want the label rules' version unchanged by the CRD, and entries for the CRD and the policy", record)
	}
	st, err := c.PolicyState(context.Background(), fleet)
	if err != nil || !slices.Equal(st.Names, want[4:]) {
		t.Errorf("the policy's compiled policies: %v, %v; want %v", st.Names, err, want[4:])
	}
}

// Two ProtectionPolicies whose compiled policies would share a name (a
// policy name with dots joined to a CRD's): the older keeps it, the newer
// one's is left to its webhook, which its state says, and the rest of
// both is compiled. A compiled name too long for the API server is left
// out alike, and the others still compiled.
func TestPolicyStateNamesWhatIsLeftToTheWebhooks(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	crd := func(name string) apiextensionsv1.CustomResourceDefinition {
		plural, group, _ := strings.Cut(name, ".")
		return apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Subresources: &apiextensionsv1.CustomResourceSubresources{Scale: &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.size"}}}}}}
	}
	// 232 characters: its label rule's name fits in 253, no policy's.
	long := "things." + strings.Repeat("g", 60) + "." + strings.Repeat("h", 60) + "." + strings.Repeat("i", 60) + "." + strings.Repeat("j", 30) + ".example.com"
	every := []v1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}}
	older := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a.replicas.w.x", CreationTimestamp: metav1.Unix(100, 0)},
		Spec: v1alpha1.ProtectionPolicySpec{Resources: every, Protection: v1alpha1.ProtectionAlways}}
	// Named "a": it sorts first by name, but was created later.
	newer := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: metav1.Unix(200, 0)},
		Spec: v1alpha1.ProtectionPolicySpec{Resources: every, Protection: v1alpha1.ProtectionAlways,
			ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardAll}}}
	// PolicyState reads the policies from Cache (the manager's informers),
	// not Client: here Client holds none, so a clash seen is Cache's.
	c := &Compiled{Client: fake.NewClientBuilder().WithScheme(s).Build(), Cache: fake.NewClientBuilder().WithScheme(s).WithObjects(older, newer).Build(),
		Options: compiled.Options{OwnNamespace: "rampart-system"}, Enabled: true,
		CRDs: func() ([]apiextensionsv1.CustomResourceDefinition, bool) {
			return []apiextensionsv1.CustomResourceDefinition{crd("w.x.deletion"), crd(long)}, true
		}}
	clash := compiled.ScaledReplicasName("a", "w.x.deletion")
	if clash != compiled.DeletionName(older.Name) {
		t.Fatalf("the example no longer clashes: %s", clash)
	}
	got, err := c.compile(context.Background(), c.Cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got.all {
		if p.Policy.Name == clash && p.Policy.Labels[compiled.LabelSource] != older.Name {
			t.Errorf("%s applied from %s, want from the older policy %s", clash, p.Policy.Labels[compiled.LabelSource], older.Name)
		}
	}
	st, err := c.PolicyState(context.Background(), newer)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{compiled.DeletionName("a"), compiled.ReplicasName("a")}
	if !slices.Equal(st.Names, want) {
		t.Errorf("compiled for %s: %v, want its other rules %v", newer.Name, st.Names, want)
	}
	var whys []string
	for _, l := range st.Left {
		whys = append(whys, l.Why)
	}
	all := strings.Join(whys, "\n")
	if len(st.Left) != 2 || !strings.Contains(all, `ProtectionPolicy "a.replicas.w.x" already compiles to a policy named "`+clash+`"`) ||
		!strings.Contains(all, "more than the API server takes (253); the CRD's name leaves no room for a policy name") {
		t.Errorf("left to the webhooks for %s:\n%s\nwant the clash with %s and the name too long", newer.Name, all, older.Name)
	}
	if st, err := c.PolicyState(context.Background(), older); err != nil || len(st.Left) != 0 || !slices.Contains(st.Names, clash) {
		t.Errorf("the older policy's state: %+v, %v; want %s compiled", st, err, clash)
	}
}
