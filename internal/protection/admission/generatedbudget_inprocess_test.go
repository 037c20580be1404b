package admission_test

import (
	"context"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
)

// TestGeneratedBudgetHandlerInProcess: a workload annotated generate-pub
// is admitted once its budget exists, sized from the annotations or the
// rollout strategy; a bad size is denied with the annotation named; a dry
// run, a workload without the annotation, and one whose budget exists
// create nothing.
func TestGeneratedBudgetHandlerInProcess(t *testing.T) {
	t.Parallel()
	workload := func(kind string, annotations map[string]string, spec map[string]any) map[string]any {
		return map[string]any{"apiVersion": "apps/v1", "kind": kind,
			"metadata": map[string]any{"name": "web", "namespace": "shop", "uid": "uid-web", "annotations": annotations}, "spec": spec}
	}
	gen := map[string]string{v1alpha1.AnnotationGeneratePUB: "true"}
	rolling := map[string]any{"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "25%"}}}
	req := func(kind string, obj map[string]any) review {
		return review{op: admissionv1.Create, gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			kind: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: kind}, namespace: "shop", name: "web", obj: obj}
	}
	for _, tt := range []struct {
		name     string
		review   review
		existing bool
		want     outcome
		budget   string // the budget's size as created, "" for none
	}{
		{name: "a Deployment: sized from its rollout", review: req("Deployment", workload("Deployment", gen, rolling)),
			want: outcome{allowed: true}, budget: "maxUnavailable=25%"},
		{name: "sized by the annotation", review: req("StatefulSet", workload("StatefulSet",
			map[string]string{v1alpha1.AnnotationGeneratePUB: "true", "rampart.io/generate-pub-min-available": "2"}, map[string]any{})),
			want: outcome{allowed: true}, budget: "minAvailable=2"},
		{name: "a bad size is denied, naming the annotation", review: req("Deployment", workload("Deployment",
			map[string]string{v1alpha1.AnnotationGeneratePUB: "true", "rampart.io/generate-pub-max-unavailable": "lots"}, rolling)),
			want: outcome{code: http.StatusForbidden, says: []string{"Deployment shop/web", v1alpha1.AnnotationGeneratePUB}}},
		{name: "without the annotation", review: req("Deployment", workload("Deployment", nil, rolling)), want: outcome{allowed: true}},
		{name: "its budget exists", review: req("Deployment", workload("Deployment", gen, rolling)), existing: true, want: outcome{allowed: true},
			budget: "minAvailable=1"},
		{name: "a dry run creates nothing", review: func() review { r := req("Deployment", workload("Deployment", gen, rolling)); r.dryRun = true; return r }(),
			want: outcome{allowed: true}},
		{name: "malformed", review: req("Deployment", map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": "x"}),
			want: outcome{code: http.StatusBadRequest}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := v1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tt.existing {
				b = b.WithObjects(pub.GeneratedBudget("shop", "Deployment", "web", v1alpha1.PodUnavailableBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1))}))
			}
			c := b.Build()
			check(t, tt.name, (&pub.GeneratedBudgets{Client: c}).Handle(context.Background(), tt.review.request(t)), tt.want)
			got := &v1alpha1.PodUnavailableBudget{}
			err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "web"}, got)
			size := ""
			switch {
			case err != nil:
			case got.Spec.MaxUnavailable != nil:
				size = "maxUnavailable=" + got.Spec.MaxUnavailable.String()
			case got.Spec.MinAvailable != nil:
				size = "minAvailable=" + got.Spec.MinAvailable.String()
			}
			if size != tt.budget {
				t.Errorf("budget %q, want %q", size, tt.budget)
			}
		})
	}
}
