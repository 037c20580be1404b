package changewindow

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
)

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestChanged(t *testing.T) {
	old := obj(t, `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"a","image":"a:1","env":[{"name":"X","value":"1"}]},{"name":"b","image":"b:1"}]}}}}`)
	guarded := []string{"spec.template.spec.containers[*].image", "spec.template.spec.containers[*].env", "spec.replicas"}
	for _, tt := range []struct {
		name string
		cur  string
		want []string
	}{
		{"nothing guarded changed (a label elsewhere)", `{"metadata":{"labels":{"x":"y"}},"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"a","image":"a:1","env":[{"name":"X","value":"1"}]},{"name":"b","image":"b:1"}]}}}}`, nil},
		{"the second image", `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"a","image":"a:1","env":[{"name":"X","value":"1"}]},{"name":"b","image":"b:2"}]}}}}`,
			[]string{"spec.template.spec.containers[1].image"}},
		{"env and replicas", `{"spec":{"replicas":4,"template":{"spec":{"containers":[{"name":"a","image":"a:1","env":[{"name":"X","value":"2"}]},{"name":"b","image":"b:1"}]}}}}`,
			[]string{"spec.replicas", "spec.template.spec.containers[0].env"}},
		{"a container added", `{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"a","image":"a:1","env":[{"name":"X","value":"1"}]},{"name":"b","image":"b:1"},{"name":"c","image":"c:1"}]}}}}`,
			[]string{"spec.template.spec.containers[2].image"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Changed(old, obj(t, tt.cur), guarded); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Changed = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	w := compile(t, v1alpha1.ChangeWindowSpec{TimeZone: "Asia/Shanghai",
		Schedules: []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Mon", "Tue", "Wed", "Thu", "Fri"}, Start: "02:00", End: "04:00"}}})
	web := protection.Object{Resource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespace: "shop", Name: "web"}
	change := []string{"spec.template.spec.containers[0].image"}
	for _, tt := range []struct {
		name           string
		req            Request
		now            string
		allowed, overr bool
		wantIn         []string
	}{
		{"inside the window", Request{Object: web, Window: "nights", Changed: change}, "2026-11-23 03:00", true, false, nil},
		{"unguarded change at peak", Request{Object: web, Window: "nights"}, "2026-11-23 20:00", true, false, nil},
		{"guarded change at peak is denied with the next opening", Request{Object: web, Window: "nights", Changed: change}, "2026-11-23 20:00", false, false,
			[]string{`ChangeWindow "nights" is closed`, "spec.template.spec.containers[0].image", "2026-11-24 02:00 CST", "in 6h0m0s", "rampart.io/change-override=<reason>"}},
		{"an allowed override passes and is marked for recording", Request{Object: web, Window: "nights", Changed: change, Override: "CVE-2026-1 hotfix", MayOverride: true, Requester: "oncall"}, "2026-11-23 20:00", true, true,
			[]string{"oncall overrode", "CVE-2026-1 hotfix"}},
		{"an override by someone else is refused", Request{Object: web, Window: "nights", Changed: change, Override: "trust me", Requester: "intern"}, "2026-11-23 20:00", false, false,
			[]string{"override by intern is refused"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.req, w, at(t, "Asia/Shanghai", tt.now))
			if v.Allowed != tt.allowed || Overridden(v) != tt.overr {
				t.Fatalf("Allowed=%v Overridden=%v, want %v %v (%q)", v.Allowed, Overridden(v), tt.allowed, tt.overr, v.Message)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(v.Message, s) {
					t.Errorf("message %q lacks %q", v.Message, s)
				}
			}
		})
	}
}
