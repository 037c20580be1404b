// Package readytest sets up what the Ready-condition controllers' unit
// tests share: a fake client that knows Rampart's types and the
// registration of a manager with nothing registered yet.
package readytest

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	policy "github.com/rampart-io/rampart/internal/protection/policy/admit"
)

// Client is a fake client holding objs; Rampart's own objects have their
// status as a subresource, as in the API server (so a reconciler must
// write it with Status().Update).
func Client(t testing.TB, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	var own []client.Object
	for _, o := range objs {
		if gvks, _, err := s.ObjectKinds(o); err == nil && gvks[0].Group == v1alpha1.GroupVersion.Group {
			own = append(own, o)
		}
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(own...).Build()
}

// Registration is the endpoint part of a single manager's registration in
// rampart-system, with no object in it, made by the ProtectionPolicies'
// protection (another protection's test adds itself to Protections).
func Registration() rampartadmission.Registration {
	return rampartadmission.Registration{Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1}, OwnNamespace: "rampart-system",
		Protections: []rampartadmission.Protection{&policy.Plugin{}}}
}
