// Package admit is the RecyclePolicy protection as the API server sees
// it: its webhooks (plugin.go), its handler (handler.go), its Ready
// condition (ready.go). What it keeps and how is the parent package.
package admit

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/policy"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// Prefix is where a RecyclePolicy's webhook is served, followed by
// the policy's name.
const Prefix = "/validate/recycle/"

// Recycle keeps a copy of each object a RecyclePolicy selects before its
// delete is admitted, and refuses the delete when the copy cannot be
// stored. It judges nothing else: every other delete is allowed.
type Recycle struct {
	// Reader reads RecyclePolicies (the manager's cache); Live reads one
	// the cache has not seen yet: a policy is in force once its webhook
	// is, which may be before the cache holds it.
	Reader, Live client.Reader
	// Bin keeps the copies; nil (the recycle bin off) keeps none.
	Bin      rampartadmission.Capturer
	Recorder events.EventRecorder
	Mapper   meta.RESTMapper
}

var _ admission.Handler = (*Recycle)(nil)

// Handle implements admission.Handler.
func (h *Recycle) Handle(ctx context.Context, req admission.Request) admission.Response {
	name, ok := rampartadmission.NameFrom(ctx)
	if req.Operation != admissionv1.Delete || rampartadmission.DryRun(req) || h.Bin == nil || !ok {
		return admission.Allowed("")
	}
	gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
	if gr == (schema.GroupResource{Resource: "events"}) {
		return admission.Allowed("")
	}
	old, bad := rampartadmission.DeletedObject(req)
	if bad != nil {
		return *bad
	}
	p := &v1alpha1.RecyclePolicy{}
	err := h.Reader.Get(ctx, client.ObjectKey{Name: name}, p)
	if apierrors.IsNotFound(err) && h.Live != nil {
		err = h.Live.Get(ctx, client.ObjectKey{Name: name}, p)
	}
	if apierrors.IsNotFound(err) {
		// Gone: the API server still holds an older configuration.
		return admission.Allowed("")
	}
	if err != nil {
		return admission.Errored(http.StatusServiceUnavailable, err)
	}
	if !covers(p, gr, old.GetLabels()) {
		return admission.Allowed("")
	}
	o := protection.Object{Resource: gr, Namespace: old.GetNamespace(), Name: old.GetName(), Singular: protection.Singular(h.Mapper, gr)}
	err = rampartadmission.Capture(ctx, h.Bin, recyclebin.Entry{
		Resource:  schema.GroupVersionResource(req.Resource),
		Kind:      req.Kind.Kind,
		Namespace: o.Namespace,
		Name:      o.Name,
		UID:       old.GetUID(),
		DeletedBy: req.UserInfo.Username,
		Policy:    p.Name,
		Object:    req.OldObject.Raw,
	})
	if err == nil {
		return admission.Allowed("")
	}
	v := recyclebin.CaptureRefused(o, fmt.Sprintf("RecyclePolicy %q", p.Name),
		fmt.Sprintf("If the delete must go through without a copy, take the object out of the policy: kubectl edit recyclepolicy %s", p.Name), err)
	return rampartadmission.Respond(h.Recorder, req, rampartadmission.About{Kind: schema.GroupVersionKind(req.Kind), Object: o, UID: old.GetUID(), Action: "Delete"}, v)
}

// covers re-checks what the API server matched: the configuration
// it holds may be older than the policy.
func covers(p *v1alpha1.RecyclePolicy, gr schema.GroupResource, objLabels map[string]string) bool {
	return policy.InScope(p.Spec.Resources, nil, p.Spec.ObjectSelector, gr, nil, objLabels)
}
