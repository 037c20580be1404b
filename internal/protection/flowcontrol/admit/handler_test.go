package admit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/admission/admissiontest"
)

// A flow control's denial is answered like every protection's: 403, a
// count, and an Event on the object whose delete was denied; the same
// delete asked again after it was admitted is not counted twice.
func TestFlowControlDenialIsRecordedLikeAnyOther(t *testing.T) {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	dfc := &v1alpha1.DeletionFlowControl{ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Spec: v1alpha1.DeletionFlowControlSpec{Limits: []v1alpha1.DeletionLimit{{Count: 1, Window: "1m"}}}}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(dfc).WithObjects(dfc).Build()
	rec := &admissiontest.Recorder{}
	h := &FlowControl{Client: c, Recorder: rec, Clock: clocktesting.NewFakeClock(time.Now())}
	ctx := rampartadmission.WithName(context.Background(), "slow")
	del := func(name, uid string) admission.Response {
		old := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"shop","name":%q,"uid":%q}}`, name, uid)
		return h.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Delete, Namespace: "shop", Name: name,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			UserInfo:  authenticationv1.UserInfo{Username: "alice"},
			OldObject: runtime.RawExtension{Raw: []byte(old)}}})
	}
	before := admissiontest.Counter(t, "rampart_admission_denials_total", "rule", "flow-control-limit", "resource", "configmaps")
	if resp := del("a", "uid-a"); !resp.Allowed {
		t.Fatalf("first delete: %+v", resp.Result)
	}
	if resp := del("a", "uid-a"); !resp.Allowed {
		t.Fatalf("the same delete asked again: %+v", resp.Result)
	}
	resp := del("b", "uid-b")
	if resp.Allowed || resp.Result.Code != http.StatusForbidden || !strings.Contains(resp.Result.Message, `DeletionFlowControl "slow"`) {
		t.Fatalf("second delete: %+v, want denied with 403 naming the flow control", resp.Result)
	}
	if n := admissiontest.Counter(t, "rampart_admission_denials_total", "rule", "flow-control-limit", "resource", "configmaps") - before; n != 1 {
		t.Errorf("rampart_admission_denials_total %v, want 1", n)
	}
	got := rec.All()
	want := []string{"Warning BreakerTripped on slow: ", "Warning DeleteDenied on ConfigMap shop/b: flow-control-limit denied DELETE by alice: "}
	if len(got) != 2 || !strings.HasPrefix(got[0], want[0]) || !strings.HasPrefix(got[1], want[1]) {
		t.Errorf("events %q, want prefixes %q", got, want)
	}
	stored := &v1alpha1.DeletionFlowControl{}
	if err := c.Get(context.Background(), ctrlclient.ObjectKey{Name: "slow"}, stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Status.Counts) != 1 || stored.Status.Counts[0] != 1 {
		t.Errorf("counts %v, want the admitted delete counted once", stored.Status.Counts)
	}
}
