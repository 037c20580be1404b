package admission

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/internal/protection"
)

// deny reports a denial: a count in rampart_admission_denials_total and,
// unless the request is a dry run, a Warning Event on the object naming
// the requester, the rule and the message.
func deny(rec events.EventRecorder, req admission.Request, kind schema.GroupVersionKind, o protection.Object, uid types.UID, rule, action, message string) {
	denials.WithLabelValues(rule, o.Resource.String()).Inc()
	if rec == nil || dryRun(req) {
		return // a dry run has no side effects, and an Event is one
	}
	ref := &corev1.ObjectReference{
		APIVersion: kind.GroupVersion().String(),
		Kind:       kind.Kind,
		Namespace:  o.Namespace,
		Name:       o.Name,
		UID:        uid,
	}
	rec.Eventf(ref, nil, corev1.EventTypeWarning, action+"Denied", action,
		"%s denied %s by %s: %s", rule, req.Operation, req.UserInfo.Username, message)
}

// warn admits a request a Warn-mode policy would have denied, with the
// denial as an admission warning (kubectl prints it) and a count.
func warn(rule string, o protection.Object, message string) admission.Response {
	warnings.WithLabelValues(rule, o.Resource.String()).Inc()
	return admission.Allowed("").WithWarnings("rampart (Warn mode): " + message)
}

func jsonDecode(raw []byte, into any) error { return json.Unmarshal(raw, into) }
