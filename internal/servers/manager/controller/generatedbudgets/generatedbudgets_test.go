package generatedbudgets

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
)

// A budget generated at a workload's creation, before the workload had a
// UID, is found again from its annotation, by kind, until it is owned.
func TestUnownedGeneratedBudgetsMapToTheirWorkload(t *testing.T) {
	b := &v1alpha1.PodUnavailableBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
		Annotations: map[string]string{pub.AnnotationGeneratedFor: "Deployment/web"}}}
	if kindOf(&appsv1.Deployment{}) != "Deployment" || kindOf(&appsv1.StatefulSet{}) != "StatefulSet" {
		t.Fatal("kindOf")
	}
	if got := unownedGeneratedFor("Deployment")(context.Background(), b); len(got) != 1 || got[0].Namespace != "shop" || got[0].Name != "web" {
		t.Errorf("Deployment: %v", got)
	}
	if got := unownedGeneratedFor("StatefulSet")(context.Background(), b); len(got) != 0 {
		t.Errorf("StatefulSet: %v", got)
	}
	if !adoptable(b, "Deployment", "web") || adoptable(b, "Deployment", "api") {
		t.Error("adoptable")
	}
	b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u", Controller: new(bool)}}
	*b.OwnerReferences[0].Controller = true
	if got := unownedGeneratedFor("Deployment")(context.Background(), b); len(got) != 0 || adoptable(b, "Deployment", "web") {
		t.Errorf("an owned budget is still adoptable: %v", got)
	}
}
