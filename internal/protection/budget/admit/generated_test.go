package admit

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// The request that asks for a generated budget creates it before it is
// admitted, sized from the annotations; a bad size is refused with the
// annotation named; a workload that does not ask creates nothing.
func TestGeneratedBudgetIsCreatedBeforeAdmission(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
	h := &GeneratedBudgets{Client: c}
	review := func(ann map[string]string) admission.Request {
		d := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1", Annotations: ann}}
		raw, _ := json.Marshal(d)
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Update, Name: "web", Namespace: "shop",
			Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Object: runtime.RawExtension{Raw: raw}}}
	}
	pub := &v1alpha1.PodUnavailableBudget{}
	key := client.ObjectKey{Namespace: "shop", Name: "web"}
	if r := h.Handle(context.Background(), review(nil)); !r.Allowed || c.Get(context.Background(), key, pub) == nil {
		t.Fatalf("a workload that asks for nothing: allowed %v, budget created", r.Allowed)
	}
	if r := h.Handle(context.Background(), review(map[string]string{v1alpha1.AnnotationGeneratePUB: "true", v1alpha1.AnnotationGeneratePUBMaxUnavailable: "lots"})); r.Allowed {
		t.Fatal("a malformed size was admitted")
	}
	r := h.Handle(context.Background(), review(map[string]string{v1alpha1.AnnotationGeneratePUB: "true", v1alpha1.AnnotationGeneratePUBMaxUnavailable: "2"}))
	if !r.Allowed {
		t.Fatalf("denied: %v", r.Result)
	}
	if err := c.Get(context.Background(), key, pub); err != nil {
		t.Fatalf("no budget created before admission: %v", err)
	}
	if pub.Spec.MaxUnavailable.String() != "2" || pub.Spec.TargetRef.Name != "web" || metav1.GetControllerOf(pub).UID != "u1" {
		t.Fatalf("generated budget %+v", pub)
	}
	// At a workload's creation it has a UID but is not stored yet: a
	// budget owned by it would be deleted by the garbage collector at
	// once. Created without an owner; the controller adopts it.
	if err := c.Delete(context.Background(), pub); err != nil {
		t.Fatal(err)
	}
	create := review(map[string]string{v1alpha1.AnnotationGeneratePUB: "true"})
	create.Operation = admissionv1.Create
	if r := h.Handle(context.Background(), create); !r.Allowed {
		t.Fatalf("create denied: %v", r.Result)
	}
	pub = &v1alpha1.PodUnavailableBudget{}
	if err := c.Get(context.Background(), key, pub); err != nil {
		t.Fatalf("no budget created before the workload's creation was admitted: %v", err)
	}
	if ref := metav1.GetControllerOf(pub); ref != nil || pub.Annotations[AnnotationGeneratedFor] != "Deployment/web" {
		t.Fatalf("budget generated at the workload's creation: owner %+v, annotations %v", ref, pub.Annotations)
	}
}
