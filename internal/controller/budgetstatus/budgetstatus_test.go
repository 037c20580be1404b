package budgetstatus

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/admission"
)

// A budget is Ready only once the budget and eviction webhooks reach its
// namespace, on every local replica.
func TestEvictionsJudgedOnlyWhereTheWebhooksReach(t *testing.T) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reg := rampartadmission.Registration{Endpoint: rampartadmission.Endpoint{URLHost: "127.0.0.1", Port: 1,
		Replicas: []string{"https://127.0.0.1:1", "https://127.0.0.1:2"}}, OwnNamespace: "rampart-system"}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(s).Build()}
	if r.evictionsJudged(ctx, "shop") {
		t.Error("judged with no configuration")
	}
	reg.BudgetNamespaces = []string{"other"}
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(rampartadmission.ValidatingConfig(reg)).Build()
	if r.evictionsJudged(ctx, "shop") {
		t.Error("judged while the webhooks reach only another namespace")
	}
	reg.BudgetNamespaces = []string{"other", "shop"}
	r.Client = fake.NewClientBuilder().WithScheme(s).WithObjects(rampartadmission.ValidatingConfig(reg)).Build()
	if !r.evictionsJudged(ctx, "shop") {
		t.Error("not judged once the webhooks reach the namespace")
	}
}
