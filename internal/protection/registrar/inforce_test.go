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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
	"github.com/rampart-io/rampart/internal/protection/protections"
	scale "github.com/rampart-io/rampart/internal/protection/scale/admit"
)

func testPolicy(name string, gen int64) v1alpha1.ProtectionPolicy {
	return v1alpha1.ProtectionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + types.UID(name), Generation: gen},
		Spec: v1alpha1.ProtectionPolicySpec{
			Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}},
			Protection: v1alpha1.ProtectionAlways,
		},
	}
}

func hookNames(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []string {
	var out []string
	for _, h := range cfg.Webhooks {
		out = append(out, h.Name)
	}
	return out
}

// A replica whose caches lag keeps what another replica admitted and
// marked, until the mark expires; then only what its caches hold.
func TestMergeLiveKeepsWhatAnotherReplicaMarked(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	base := rampartadmission.Registration{Protections: protections.All(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}
	fresh := testPolicy("fresh", 1)
	other := base.With(&fresh).WithKeys(rampartadmission.ScaleTargetKeys, "apps/deployments/shop/web")
	live := rampartadmission.ValidatingConfig(other)
	marks := func(until time.Time) {
		b, _ := json.Marshal(map[string]string{
			"webhook/fresh.deletion.policy.rampart.io": until.Format(time.RFC3339Nano),
			"scale/apps/deployments/shop/web":          until.Format(time.RFC3339Nano),
		})
		live.Annotations = map[string]string{pendingAnnotation: string(b)}
	}

	marks(now.Add(10 * time.Second))
	sets := []string{rampartadmission.ScaleTargetKeys, pub.NamespaceKeys}
	want, kept := mergeLive(base, sets, nil, live, now)
	if !slices.Contains(hookNames(want), "fresh.deletion.policy.rampart.io") || !slices.Contains(hookNames(want), "scale.rampart.io") {
		t.Errorf("a marked policy webhook and scale target were dropped: %v", hookNames(want))
	}
	if len(kept) != 2 {
		t.Errorf("marks kept = %v, want both", kept)
	}
	if !sameReach(live.Webhooks, want.Webhooks) {
		t.Error("the merged configuration differs from the live one: the lagging replica would rewrite it")
	}

	marks(now.Add(-time.Second))
	want, kept = mergeLive(base, sets, nil, live, now)
	if slices.Contains(hookNames(want), "fresh.deletion.policy.rampart.io") || slices.Contains(hookNames(want), "scale.rampart.io") || len(kept) != 0 {
		t.Errorf("expired marks still keep %v (marks %v)", hookNames(want), kept)
	}
}

// Pending coverage replaces what the caches say about the same object
// until they hold that generation, and then is forgotten.
func TestPendingCoverageUntilTheCachesCatchUp(t *testing.T) {
	old := testPolicy("p", 1)
	cached := rampartadmission.Registration{}.With(&old)
	newer := testPolicy("p", 2)
	newer.Spec.Protection = v1alpha1.ProtectionCascading
	p := pending{kind: pendingObject, obj: &newer}
	if caughtUp(p, cached) {
		t.Error("generation 1 in the cache does not hold generation 2")
	}
	merged := rampartadmission.ObjectsOf[*v1alpha1.ProtectionPolicy](withPending(cached, []pending{p}, nil), rampartadmission.PolicyKind)
	if len(merged) != 1 || merged[0].Spec.Protection != v1alpha1.ProtectionCascading {
		t.Errorf("merged policies = %+v, want the pending generation only", merged)
	}
	old.Generation = 2
	if !caughtUp(p, cached) {
		t.Error("the cache holds generation 2: the pending entry should go")
	}
	target := pending{kind: pendingKey, set: rampartadmission.ScaleTargetKeys, key: "apps/deployments/shop/web"}
	if caughtUp(target, cached) {
		t.Error("a scale target the view does not list yet is not caught up")
	}
	if got := withPending(cached, []pending{target}, nil).Keys[rampartadmission.ScaleTargetKeys]; !slices.Equal(got, []string{"apps/deployments/shop/web"}) {
		t.Errorf("scale targets = %v", got)
	}
}

// Each kind of pending coverage is marked by what it brings: the webhooks
// its object owns, or its key.
func TestPendingMarksNameWhatEachKindBrings(t *testing.T) {
	base := rampartadmission.Registration{Protections: protections.All(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}
	guarded := testPolicy("web", 1)
	guarded.Spec.ExplicitReplicas = &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardAll}
	window := &v1alpha1.ChangeWindow{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly"},
		Spec: v1alpha1.ChangeWindowSpec{Resources: []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}}}
	sets := []rampartadmission.KeySet{{Name: rampartadmission.ScaleTargetKeys, OfObjects: func(reg rampartadmission.Registration) []string {
		var out []string
		for _, p := range rampartadmission.ObjectsOf[*v1alpha1.ProtectionPolicy](reg, rampartadmission.PolicyKind) {
			out = append(out, "apps/deployments/shop/"+p.Name)
		}
		return out
	}}}
	for _, tt := range []struct {
		p    pending
		want []string
	}{
		{pending{kind: pendingKey, set: rampartadmission.ScaleTargetKeys, key: "apps/deployments/shop/web"}, []string{"scale/apps/deployments/shop/web"}},
		{pending{kind: pendingKey, set: pub.NamespaceKeys, key: "shop"}, []string{"budgets/shop"}},
		{pending{kind: pendingObject, obj: window}, []string{"webhook/nightly.shop.window.rampart.io"}},
		{pending{kind: pendingObject, obj: &guarded}, []string{"scale/apps/deployments/shop/web",
			"webhook/web.deletion.policy.rampart.io", "webhook/web.replicas.policy.rampart.io"}},
		{pending{kind: pendingWidening, set: scale.Widening, obj: &guarded}, []string{"webhook/web.scale.policy.rampart.io"}},
	} {
		if got := pendingMarks(base, tt.p, sets); !slices.Equal(got, tt.want) {
			t.Errorf("marks of %s %s%v = %v, want %v", tt.p.set, tt.p.key, tt.p.obj != nil, got, tt.want)
		}
	}
}

// A policy put in force twice within the pending time (changed twice, or a
// namespace relabelled into it twice) widens the scale webhook once: two
// webhooks of one name would make the API server refuse the whole
// configuration, and with it every protection registered after.
func TestScaleWideningOncePerPolicy(t *testing.T) {
	p := testPolicy("guard", 1)
	p.Spec.ExplicitReplicas = &v1alpha1.ExplicitReplicas{Guard: v1alpha1.GuardAll}
	p2 := p
	p2.Generation = 2
	reg := rampartadmission.Registration{Protections: protections.All(), Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system"}
	until := time.Now().Add(time.Minute)
	reg = withPending(reg, []pending{
		{kind: pendingWidening, set: scale.Widening, obj: &p, until: until},
		{kind: pendingWidening, set: scale.Widening, obj: &p2, until: until},
	}, nil)
	names := hookNames(rampartadmission.ValidatingConfig(reg))
	n := 0
	for _, name := range names {
		if name == "guard.scale.policy.rampart.io" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("guard.scale.policy.rampart.io registered %d times: %v", n, names)
	}
}

type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("cache not ready")
}

// A registration the caches could not list is no registration: written, it
// would drop the unlisted protections' webhooks for every replica.
func TestNoRegistrationFromAFailedList(t *testing.T) {
	r := &Registrar{reader: failingReader{}, protections: protections.All()}
	if _, err := r.fromCaches(context.Background()); err == nil || !strings.Contains(err.Error(), "listing protectionpolicies: cache not ready") {
		t.Fatalf("err = %v", err)
	}
	if _, _, err := r.desired(context.Background(), time.Now()); err == nil {
		t.Fatal("desired made a registration from a failed list")
	}
}
