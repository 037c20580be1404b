package compiled_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// scaledCRD is a CRD (plural.group) with a scale subresource at .spec.replicas.
func scaledCRD(name string) compiled.ScaledResource {
	plural, group, _ := strings.Cut(name, ".")
	return compiled.ScaledResource{CRD: name, Resource: schema.GroupResource{Group: group, Resource: plural}, Path: ".spec.replicas"}
}

// guarding is a policy with protection Always and explicit replicas over
// every resource: it compiles to each name a policy can have.
func guarding(name string) v1alpha1.ProtectionPolicy {
	return v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:        []v1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}},
		Protection:       v1alpha1.ProtectionAlways,
		ExplicitReplicas: &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardAll},
	}}
}

func names(ps []compiled.Policy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Policy.Name)
	}
	return out
}

// A policy name with dots can join a CRD's name into the name another
// policy compiles to (the examples of Names' comment): the first policy
// keeps it, the later one is left to the webhooks with a reason naming
// the first and the fix, and everything else of both is compiled.
func TestClashingNamesLeaveTheLaterPolicyToTheWebhooks(t *testing.T) {
	for _, tt := range []struct {
		first, later, crd, clash string
	}{
		{"a.replicas.w.x", "a", "w.x.deletion", compiled.DeletionName("a.replicas.w.x")},
		{"a.replicas.w.x", "a", "w.x.replicas", compiled.ReplicasName("a.replicas.w.x")},
		{"a.replicas.w", "a", "w.replicas.x.y.z", compiled.ScaledReplicasName("a", "w.replicas.x.y.z")},
	} {
		t.Run(tt.clash, func(t *testing.T) {
			o := compiled.Options{Scaled: []compiled.ScaledResource{scaledCRD(tt.crd)}}
			if tt.clash == compiled.ScaledReplicasName("a", "w.replicas.x.y.z") {
				o.Scaled = append(o.Scaled, scaledCRD("x.y.z"))
			}
			kept, left := compiled.Compile([]v1alpha1.ProtectionPolicy{guarding(tt.first), guarding(tt.later)}, o)
			if len(left) != 1 || left[0].Policy != tt.later || left[0].Name != tt.clash ||
				!strings.Contains(left[0].Why, `ProtectionPolicy "`+tt.first+`" already compiles to a policy named "`+tt.clash+`"`) ||
				!strings.Contains(left[0].Why, "rename one of the two ProtectionPolicies") {
				t.Fatalf("left to the webhooks: %+v; want %s of %s, naming %s and the fix", left, tt.clash, tt.later, tt.first)
			}
			got := names(kept)
			for i, n := range got {
				if slices.Contains(got[i+1:], n) {
					t.Errorf("%s compiled twice: %v", n, got)
				}
			}
			for _, p := range kept {
				if p.Policy.Name == tt.clash && p.Policy.Labels[compiled.LabelSource] != tt.first {
					t.Errorf("%s compiled from %s, want the first policy %s", tt.clash, p.Policy.Labels[compiled.LabelSource], tt.first)
				}
			}
			first, later := guarding(tt.first), guarding(tt.later)
			if want := len(compiled.FromPolicy(&first, o)) + len(compiled.FromPolicy(&later, o)) - 1; len(got)-len(compiled.LabelRules(o))-len(o.Scaled) != want {
				t.Errorf("compiled %v: want every other rule of both policies", got)
			}
		})
	}
}

// The property Names' comment proves, over tricky names: the label rules'
// compiled policies never clash with each other or with a policy's, and
// policies whose names have no dots never clash, whatever the CRDs.
func TestNamesWithoutDotsNeverClash(t *testing.T) {
	crds := []string{"w.x.deletion", "w.x.replicas", "x.y.z", "w.replicas.x.y.z", "a.policy.rampart.io", "replicas.rampart.io",
		"deletion.policy.rampart.io", "a.replicas.x.y", "policy.replicas.rampart.io", "b.deletion.policy.x.y"}
	var o compiled.Options
	for _, c := range crds {
		o.Scaled = append(o.Scaled, scaledCRD(c))
	}
	dotless := []string{"a", "b", "w", "x", "replicas", "deletion", "policy", "rampart", "labels", "probe", "a-replicas", "io"}
	var policies []v1alpha1.ProtectionPolicy
	for _, n := range dotless {
		policies = append(policies, guarding(n))
	}
	kept, left := compiled.Compile(policies, o)
	if len(left) > 0 {
		t.Errorf("policies without dots in their names clashed: %+v", left)
	}
	if len(kept) != len(compiled.LabelRules(o))+len(o.Scaled)+len(dotless)*(2+len(crds)) {
		t.Errorf("compiled %d policies, want every rule of every source", len(kept))
	}
	// With dotted policy names too, only policies clash (the label rules'
	// are admitted first and would be the holders named).
	for _, n := range []string{"a.replicas.w.x", "a.replicas.w", "a.replicas.x.y.deletion", "replicas.rampart.io", "probe.compiled"} {
		policies = append(policies, guarding(n))
	}
	_, left = compiled.Compile(policies, o)
	for _, l := range left {
		if l.Policy == "" || strings.Contains(l.Why, "the label rules") || !strings.Contains(l.Why, "ProtectionPolicy") {
			t.Errorf("a clash not between two policies: %+v", l)
		}
	}
	if len(left) == 0 {
		t.Error("no clash among policies with dots: the examples no longer show the risk the check is for")
	}
}

// A compiled policy's name over 253 characters (a policy's name joined to
// a long CRD's) is left to the webhooks with the longest policy name that
// would compile it; the policy's other rules are compiled.
func TestNameTooLongLeftToTheWebhooksSayingHowLong(t *testing.T) {
	long := strings.Repeat("g", 60) + "." + strings.Repeat("h", 60) + "." + strings.Repeat("i", 60) + ".example.com"
	o := compiled.Options{Scaled: []compiled.ScaledResource{scaledCRD("things." + long)}}
	name := strings.Repeat("p", 40)
	kept, left := compiled.Compile([]v1alpha1.ProtectionPolicy{guarding(name)}, o)
	scaled := compiled.ScaledReplicasName(name, "things."+long)
	room := 253 - (len(scaled) - len(name))
	if len(left) != 1 || left[0].Name != scaled || left[0].Policy != name ||
		!strings.Contains(left[0].Why, "more than the API server takes (253)") || !strings.Contains(left[0].Why, "a policy name of at most "+strconv.Itoa(room)+" characters compiles it") {
		t.Fatalf("left to the webhooks: %+v; want %s, saying a name of at most %d characters compiles it", left, scaled, room)
	}
	if got := names(kept); !slices.Contains(got, compiled.DeletionName(name)) || !slices.Contains(got, compiled.ReplicasName(name)) {
		t.Errorf("compiled %v: the policy's other rules are missing", got)
	}
	// The advice holds: a name of that length compiles, one longer does not.
	if _, left := compiled.Compile([]v1alpha1.ProtectionPolicy{guarding(strings.Repeat("p", room))}, o); len(left) != 0 {
		t.Errorf("a policy name of %d characters: %+v", room, left)
	}
	if _, left := compiled.Compile([]v1alpha1.ProtectionPolicy{guarding(strings.Repeat("p", room+1))}, o); len(left) != 1 {
		t.Errorf("a policy name of %d characters: %+v, want its custom resources' rule left out", room+1, left)
	}
}
