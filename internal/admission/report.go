package admission

import (
	"math"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/internal/protection"
)

// about is the object a verdict is about, as its Event names it.
type about struct {
	Kind   schema.GroupVersionKind
	Object protection.Object
	UID    types.UID
	// Action names the Event: "Delete" gives reason DeleteDenied.
	Action string
	// DryRun is set when the request's body asks for a dry run (an
	// eviction's deleteOptions), which the review does not say.
	DryRun bool
}

// respond answers a verdict, for every protection alike:
//   - allowed: admitted;
//   - Warn: admitted with the message as an admission warning (kubectl
//     prints it), counted in rampart_admission_warnings_total;
//   - denied: the verdict's code (403 Forbidden unless it names another,
//     with Retry-After when it has one), counted in
//     rampart_admission_denials_total, and, unless the request is a dry run,
//     a Warning Event on the object naming the requester, the rule and the
//     message.
func respond(rec events.EventRecorder, req admission.Request, s about, v protection.Verdict) admission.Response {
	switch {
	case v.Allowed:
		return admission.Allowed("")
	case v.Warn:
		warnings.WithLabelValues(v.Rule, s.Object.Resource.String()).Inc()
		return admission.Allowed("").WithWarnings("rampart (Warn mode): " + v.Message)
	}
	denials.WithLabelValues(v.Rule, s.Object.Resource.String()).Inc()
	if rec != nil && !dryRun(req) && !s.DryRun { // a dry run has no side effects, and an Event is one
		ref := &corev1.ObjectReference{
			APIVersion: s.Kind.GroupVersion().String(),
			Kind:       s.Kind.Kind,
			Namespace:  s.Object.Namespace,
			Name:       s.Object.Name,
			UID:        s.UID,
		}
		rec.Eventf(ref, nil, corev1.EventTypeWarning, s.Action+"Denied", s.Action,
			"%s denied %s by %s: %s", v.Rule, req.Operation, req.UserInfo.Username, v.Message)
	}
	resp := admission.Denied(v.Message)
	if v.Code != 0 && v.Code != http.StatusForbidden {
		resp.Result.Code, resp.Result.Reason = v.Code, v.Reason
	}
	if v.RetryAfter > 0 {
		resp.Result.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(min(math.Ceil(v.RetryAfter.Seconds()), math.MaxInt32))}
	}
	return resp
}
