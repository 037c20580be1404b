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

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
)

// About is what a verdict answers: the object, as its Event names it,
// and how the request is answered.
type About struct {
	Kind   schema.GroupVersionKind
	Object protection.Object
	UID    types.UID
	// Action names the Event: "Delete" gives reason DeleteDenied.
	Action string
	// DryRun is set when the request's body asks for a dry run (an
	// eviction's deleteOptions), which the review does not say.
	DryRun bool
	// Warn answers a refusal as an admission warning: the rule that
	// decided is in Warn mode. The mode is the policy's, not the rule's
	// decision, so it is the adapter's to say, not the verdict's.
	Warn bool
}

// respond answers a verdict, for every protection alike:
//   - allowed: admitted;
//   - refused in Warn mode (s.Warn): admitted with the message as an
//     admission warning (kubectl prints it), counted in
//     rampart_admission_warnings_total;
//   - refused: the code of its kind of refusal (refusalStatus), with Retry-After
//     when it has one, counted in rampart_admission_denials_total by its
//     reason, and, unless the request is a dry run, a Warning Event on the
//     object naming the requester, the reason and the message.
func Respond(rec events.EventRecorder, req admission.Request, s About, v verdict.Verdict) admission.Response {
	switch {
	case v.Allowed:
		return admission.Allowed("")
	case s.Warn:
		warnings.WithLabelValues(v.Reason, s.Object.Resource.String()).Inc()
		return admission.Allowed("").WithWarnings("rampart (Warn mode): " + v.Message)
	}
	denials.WithLabelValues(v.Reason, s.Object.Resource.String()).Inc()
	if rec != nil && !DryRun(req) && !s.DryRun { // a dry run has no side effects, and an Event is one
		ref := &corev1.ObjectReference{
			APIVersion: s.Kind.GroupVersion().String(),
			Kind:       s.Kind.Kind,
			Namespace:  s.Object.Namespace,
			Name:       s.Object.Name,
			UID:        s.UID,
		}
		rec.Eventf(ref, nil, corev1.EventTypeWarning, s.Action+"Denied", s.Action,
			"%s denied %s by %s: %s", v.Reason, req.Operation, req.UserInfo.Username, v.Message)
	}
	resp := admission.Denied(v.Message)
	if code, reason := refusalStatus(v.Refusal); code != http.StatusForbidden {
		resp.Result.Code, resp.Result.Reason = code, reason
	}
	if v.RetryAfter > 0 {
		resp.Result.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(min(math.Ceil(v.RetryAfter.Seconds()), math.MaxInt32))}
	}
	return resp
}

// refusalStatus is the HTTP code and reason a refusal of kind r is answered
// with: a budget's refusal is throttled and answered 429, as the Eviction
// API answers for a PodDisruptionBudget, so that kubectl drain and
// controllers retry; a refusal for want of a store (the recycle bin's)
// 503, which the garbage collector and the namespace controller retry.
func refusalStatus(r verdict.Refusal) (int32, metav1.StatusReason) {
	switch r {
	case verdict.Throttled:
		return http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests
	case verdict.Unavailable:
		return http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
	case verdict.Unauthorized:
		return http.StatusUnauthorized, metav1.StatusReasonUnauthorized
	case verdict.Invalid:
		return http.StatusBadRequest, metav1.StatusReasonBadRequest
	}
	return http.StatusForbidden, metav1.StatusReasonForbidden
}
