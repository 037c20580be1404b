package registrar

import (
	"encoding/json"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

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
