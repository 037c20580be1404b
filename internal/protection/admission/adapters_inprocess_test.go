package admission_test

// Helpers of the in-process adapter tests (*_inprocess_test.go): each
// handler is built with fake views and clients, given an AdmissionRequest
// made by hand, and its answer is read as the API server would. They run
// with -short, without a control plane; the real API server's side of
// every path is tested in the other files.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// review is an AdmissionRequest as the API server sends it.
type review struct {
	op          admissionv1.Operation
	gvr         schema.GroupVersionResource
	kind        schema.GroupVersionKind
	subResource string
	namespace   string
	name        string
	old, obj    any // marshalled to JSON; nil leaves the field empty
	options     any
	dryRun      bool
	user        string
}

func (r review) request(t *testing.T) admission.Request {
	t.Helper()
	raw := func(o any) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	user := r.user
	if user == "" {
		user = "alice"
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         "review-1",
		Operation:   r.op,
		Resource:    metav1.GroupVersionResource(r.gvr),
		Kind:        metav1.GroupVersionKind(r.kind),
		SubResource: r.subResource,
		Namespace:   r.namespace,
		Name:        r.name,
		OldObject:   raw(r.old),
		Object:      raw(r.obj),
		Options:     raw(r.options),
		DryRun:      &r.dryRun,
		UserInfo:    authenticationv1.UserInfo{Username: user},
	}}
}

// outcome is what the API server makes of a response.
type outcome struct {
	allowed bool
	code    int32 // for a refusal: 403 denied, 429 retry, 400/503 errors
	// says are substrings of the message, or of a warning when allowed.
	says []string
}

func check(t *testing.T, name string, got admission.Response, want outcome) {
	t.Helper()
	if got.Allowed != want.allowed {
		t.Errorf("%s: allowed = %v, want %v (%+v)", name, got.Allowed, want.allowed, got.Result)
		return
	}
	text := strings.Join(got.Warnings, "\n")
	if !got.Allowed {
		code := int32(http.StatusForbidden)
		if got.Result != nil && got.Result.Code != 0 {
			code = got.Result.Code
		}
		if code != want.code {
			t.Errorf("%s: code = %d, want %d (%s)", name, code, want.code, got.Result.Message)
		}
		text = got.Result.Message
	}
	for _, s := range want.says {
		if !strings.Contains(text, s) {
			t.Errorf("%s: answer %q does not say %q", name, text, s)
		}
	}
}

// recorded drains the Events a fake recorder holds.
func recorded(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// throughPolicy is the context of a request that came through a policy's
// webhook, as the server builds it from the path.
func throughPolicy(prefix, name string) context.Context {
	r := &http.Request{URL: &url.URL{Path: prefix + name}}
	return rampartadmission.PolicyFromPath(prefix)(context.Background(), r)
}
