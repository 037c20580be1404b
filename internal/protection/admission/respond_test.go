package admission

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
	"github.com/rampart-io/rampart/internal/protection/admission/admissiontest"
)

// recorder keeps the Events a handler writes, with the object each names.

func TestRespondAnswersCountsAndRecordsEveryVerdictAlike(t *testing.T) {
	cm := protection.Object{Resource: schema.GroupResource{Resource: "configmaps"}, Namespace: "shop", Name: "settings"}
	cmAbout := About{Kind: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Object: cm, UID: "u1", Action: "Delete"}
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
		about      About
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
		about:   About{Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Object: cm, Action: "Disruption", DryRun: true},
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
			rec := &admissiontest.Recorder{}
			resp := Respond(rec, tt.req, tt.about, tt.verdict)
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
			if got := rec.All(); strings.Join(got, "|") != strings.Join(tt.events, "|") {
				t.Errorf("events %q, want %q", got, tt.events)
			}
		})
	}
	// Without a recorder, a denial is still answered and counted.
	denials.Reset()
	if resp := Respond(nil, request(false), cmAbout, denied); resp.Allowed || testutil.ToFloat64(denials.WithLabelValues("test-rule", "configmaps")) != 1 {
		t.Errorf("without a recorder: %+v", resp)
	}
}
