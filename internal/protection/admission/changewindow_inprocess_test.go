package admission_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	changewindow "github.com/rampart-io/rampart/internal/protection/changewindow/admit"
)

// TestWindowsHandlerInProcess covers what the change-window adapter reads
// of a request: which operations a window judges, the fields before and
// after (the old object for a DELETE), and an override set by this
// request rather than left on the object.
func TestWindowsHandlerInProcess(t *testing.T) {
	t.Parallel()
	// Sunday noon: outside a window open on Mondays from 09:00 to 10:00.
	sunday := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	cw := &v1alpha1.ChangeWindow{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "weekdays", UID: "uid-cw", Generation: 1},
		Spec: v1alpha1.ChangeWindowSpec{
			Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}},
			Fields:     []string{"spec.replicas"},
			Operations: []v1alpha1.WindowOperation{"UPDATE", "DELETE"},
			TimeZone:   "UTC",
			Schedules:  []v1alpha1.Schedule{{Days: []v1alpha1.Weekday{"Mon"}, Start: "09:00", End: "10:00"}},
			Override:   v1alpha1.Subjects{Users: []string{"oncall"}},
		}}
	override := map[string]string{v1alpha1.AnnotationChangeOverride: "incident 42"}
	update := func(old, cur any) review {
		return review{op: admissionv1.Update, gvr: deploymentsGVR, kind: deploymentKind, namespace: "shop", name: "web", old: old, obj: cur}
	}
	closed := outcome{code: http.StatusForbidden, says: []string{`deployments.apps "web"`, "weekdays"}}
	for _, tt := range []struct {
		name   string
		window string // NAMESPACE/NAME of the webhook called
		review review
		want   outcome
		events int
	}{
		{name: "a guarded field changes outside the window", review: update(deploymentWith(2, nil, nil), deploymentWith(3, nil, nil)),
			want: closed, events: 1},
		{name: "an unguarded field changes at any time", review: update(deploymentWith(2, nil, nil), deploymentWith(2, map[string]string{"a": "b"}, nil)),
			want: outcome{allowed: true}},
		{name: "a dry run is judged, without an Event", review: func() review {
			r := update(deploymentWith(2, nil, nil), deploymentWith(3, nil, nil))
			r.dryRun = true
			return r
		}(), want: closed},
		{name: "an override set by this request, by whom the window names", review: func() review {
			r := update(deploymentWith(2, nil, nil), deploymentWith(3, nil, override))
			r.user = "oncall"
			return r
		}(), want: outcome{allowed: true, says: []string{"incident 42", "(recorded)"}}, events: 1},
		{name: "an override by someone else", review: update(deploymentWith(2, nil, nil), deploymentWith(3, nil, override)), want: closed, events: 1},
		{name: "an override left on the object from before", review: func() review {
			r := update(deploymentWith(2, nil, override), deploymentWith(3, nil, override))
			r.user = "oncall"
			return r
		}(), want: closed, events: 1},
		{name: "a DELETE is judged on the old object", review: review{op: admissionv1.Delete, gvr: deploymentsGVR, kind: deploymentKind,
			namespace: "shop", name: "web", old: deploymentWith(2, nil, nil)}, want: closed, events: 1},
		{name: "an operation the window does not list", review: review{op: admissionv1.Create, gvr: deploymentsGVR, kind: deploymentKind,
			namespace: "shop", name: "web", obj: deploymentWith(2, nil, nil)}, want: outcome{allowed: true}},
		{name: "a window that is gone", window: "shop/gone", review: update(deploymentWith(2, nil, nil), deploymentWith(3, nil, nil)),
			want: outcome{allowed: true}},
	} {
		s := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(s)
		_ = v1alpha1.AddToScheme(s)
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(cw.DeepCopy()).Build()
		rec := events.NewFakeRecorder(10)
		h := &changewindow.Windows{Reader: c, Recorder: rec, Clock: clocktesting.NewFakePassiveClock(sunday)}
		window := tt.window
		if window == "" {
			window = "shop/weekdays"
		}
		ctx := changewindow.FromPath(context.Background(), &http.Request{URL: &url.URL{Path: changewindow.Prefix + window}})
		check(t, tt.name, h.Handle(ctx, tt.review.request(t)), tt.want)
		if got := recorded(rec); len(got) != tt.events {
			t.Errorf("%s: %d Events %v, want %d", tt.name, len(got), got, tt.events)
		}
	}
}
