package admission

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
)

// recorder keeps the Events a handler writes, with the object each names.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if ref, ok := regarding.(*corev1.ObjectReference); ok {
		name = ref.Kind + " " + ref.Namespace + "/" + ref.Name
	} else if o, ok := regarding.(interface{ GetName() string }); ok {
		name = o.GetName()
	}
	r.events = append(r.events, fmt.Sprintf("%s %s on %s: %s", eventtype, reason, name, fmt.Sprintf(note, args...)))
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func TestRespondAnswersCountsAndRecordsEveryVerdictAlike(t *testing.T) {
	cm := protection.Object{Resource: schema.GroupResource{Resource: "configmaps"}, Namespace: "shop", Name: "settings"}
	cmAbout := about{Kind: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Object: cm, UID: "u1", Action: "Delete"}
	cmWarn := cmAbout
	cmWarn.Warn = true
	request := func(dry bool) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Delete, Namespace: "shop", Name: "settings", DryRun: ptr.To(dry),
			UserInfo: authenticationv1.UserInfo{Username: "alice"}}}
	}
	denied := verdict.Verdict{Reason: "test-rule", Message: "no, because"}
	for _, tt := range []struct {
		name       string
		req        admission.Request
		about      about
		verdict    verdict.Verdict
		allowed    bool
		code       int32
		reason     metav1.StatusReason
		retryAfter int32
		warnings   []string
		denials    float64
		warned     float64
		events     []string
	}{{
		name: "allowed", req: request(false), about: cmAbout, verdict: verdict.Allow, allowed: true,
	}, {
		name: "allowed under a Warn-mode rule", req: request(false), about: cmWarn,
		verdict: verdict.Allow, allowed: true,
	}, {
		name: "denied", req: request(false), about: cmAbout, verdict: denied,
		code: http.StatusForbidden, reason: metav1.StatusReasonForbidden, denials: 1,
		events: []string{"Warning DeleteDenied on ConfigMap shop/settings: test-rule denied DELETE by alice: no, because"},
	}, {
		name: "denied in a dry run: counted, no Event", req: request(true), about: cmAbout, verdict: denied,
		code: http.StatusForbidden, reason: metav1.StatusReasonForbidden, denials: 1,
	}, {
		name: "denied in a dry run the body asks for", req: request(false),
		about:   about{Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Object: cm, Action: "Disruption", DryRun: true},
		verdict: denied, code: http.StatusForbidden, reason: metav1.StatusReasonForbidden, denials: 1,
	}, {
		name: "denied with its own code and a retry time", req: request(false), about: cmAbout,
		verdict: verdict.Verdict{Reason: "test-rule", Message: "later", Refusal: verdict.Throttled,
			RetryAfter: 1500 * time.Millisecond},
		code: http.StatusTooManyRequests, reason: metav1.StatusReasonTooManyRequests, retryAfter: 2, denials: 1,
		events: []string{"Warning DeleteDenied on ConfigMap shop/settings: test-rule denied DELETE by alice: later"},
	}, {
		name: "Warn mode: admitted with a warning, counted as one", req: request(false), about: cmWarn,
		verdict: verdict.Verdict{Reason: "test-rule", Message: "would deny"},
		allowed: true, warnings: []string{"rampart (Warn mode): would deny"}, warned: 1,
	}} {
		t.Run(tt.name, func(t *testing.T) {
			denials.Reset()
			warnings.Reset()
			rec := &recorder{}
			resp := respond(rec, tt.req, tt.about, tt.verdict)
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed {
				if resp.Result.Code != tt.code || resp.Result.Reason != tt.reason || resp.Result.Message != tt.verdict.Message {
					t.Errorf("answered %d %s %q, want %d %s %q", resp.Result.Code, resp.Result.Reason, resp.Result.Message,
						tt.code, tt.reason, tt.verdict.Message)
				}
				var after int32
				if resp.Result.Details != nil {
					after = resp.Result.Details.RetryAfterSeconds
				}
				if after != tt.retryAfter {
					t.Errorf("retry after %d s, want %d", after, tt.retryAfter)
				}
			}
			if strings.Join(resp.Warnings, "|") != strings.Join(tt.warnings, "|") {
				t.Errorf("warnings %q, want %q", resp.Warnings, tt.warnings)
			}
			if n := testutil.ToFloat64(denials.WithLabelValues(tt.verdict.Reason, "configmaps")); n != tt.denials {
				t.Errorf("rampart_admission_denials_total %v, want %v", n, tt.denials)
			}
			if n := testutil.ToFloat64(warnings.WithLabelValues(tt.verdict.Reason, "configmaps")); n != tt.warned {
				t.Errorf("rampart_admission_warnings_total %v, want %v", n, tt.warned)
			}
			if got := rec.all(); strings.Join(got, "|") != strings.Join(tt.events, "|") {
				t.Errorf("events %q, want %q", got, tt.events)
			}
		})
	}
	// Without a recorder, a denial is still answered and counted.
	denials.Reset()
	if resp := respond(nil, request(false), cmAbout, denied); resp.Allowed || testutil.ToFloat64(denials.WithLabelValues("test-rule", "configmaps")) != 1 {
		t.Errorf("without a recorder: %+v", resp)
	}
}

// A flow control's denial is answered like every protection's: 403, a
// count, and an Event on the object whose delete was denied; the same
// delete asked again after it was admitted is not counted twice.
func TestFlowControlDenialIsRecordedLikeAnyOther(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dfc := &v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Spec: v1alpha1.DeletionFlowControlSpec{Limits: []v1alpha1.DeletionLimit{{Count: 1, Window: "1m"}}}}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(dfc).WithObjects(dfc).Build()
	rec := &recorder{}
	h := &FlowControl{Client: c, Recorder: rec, Clock: clocktesting.NewFakeClock(time.Now())}
	ctx := context.WithValue(context.Background(), policyKey{}, "slow")
	del := func(name, uid string) admission.Response {
		old := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"shop","name":%q,"uid":%q}}`, name, uid)
		return h.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Delete, Namespace: "shop", Name: name,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			UserInfo:  authenticationv1.UserInfo{Username: "alice"},
			OldObject: runtime.RawExtension{Raw: []byte(old)}}})
	}
	denials.Reset()
	if resp := del("a", "uid-a"); !resp.Allowed {
		t.Fatalf("first delete: %+v", resp.Result)
	}
	if resp := del("a", "uid-a"); !resp.Allowed {
		t.Fatalf("the same delete asked again: %+v", resp.Result)
	}
	resp := del("b", "uid-b")
	if resp.Allowed || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, `DeletionFlowControl "slow"`) {
		t.Fatalf("second delete: %+v, want denied with 403 naming the flow control", resp.Result)
	}
	if n := testutil.ToFloat64(denials.WithLabelValues("flow-control-limit", "configmaps")); n != 1 {
		t.Errorf("rampart_admission_denials_total %v, want 1", n)
	}
	got := rec.all()
	want := []string{"Warning BreakerTripped on slow: ", "Warning DeleteDenied on ConfigMap shop/b: flow-control-limit denied DELETE by alice: "}
	if len(got) != 2 || !strings.HasPrefix(got[0], want[0]) || !strings.HasPrefix(got[1], want[1]) {
		t.Errorf("events %q, want prefixes %q", got, want)
	}
	stored := &v1alpha1.DeletionFlowControl{}
	if err := c.Get(context.Background(), ctrlclient.ObjectKey{Name: "slow"}, stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Status.Counts) != 1 || stored.Status.Counts[0] != 1 {
		t.Errorf("counts %v, want the admitted delete counted once", stored.Status.Counts)
	}
}
