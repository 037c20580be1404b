package compiled_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
)

// BenchmarkCompiledAdmission is what the API server spends on Rampart's
// compiled policies for one request, in process (matching, then CEL:
// kube-apiserver's own libraries), without the noise of a whole request:
// the label rules as the manager applies them, against a bare policy that
// denies with a fixed message (the floor of any ValidatingAdmissionPolicy
// denial). BenchmarkDeleteLatencyByEngine in internal/protection/admission measures
// the same through a real API server. Run:
//
//	go test -run '^$' -bench CompiledAdmission ./internal/protection/compiled/
func BenchmarkCompiledAdmission(b *testing.B) {
	api := compiledtest.NewAPIServer(b, cluster...)
	labels := api.Load(b, compiled.LabelRules(tableOptions))
	bare := compiled.LabelRules(compiled.Options{})[0]
	bare.Policy.Spec.Variables = nil
	bare.Policy.Spec.Validations = []admissionregistrationv1.Validation{{Expression: "false", Message: "denied", Reason: ptr.To(metav1.StatusReasonForbidden)}}
	floor := api.Load(b, []compiled.Policy{bare})
	for _, bc := range []struct {
		name     string
		policies *compiledtest.Loaded
		req      compiledtest.Request
		denied   bool
	}{
		{name: "unlabelled delete (matching only)", policies: labels, req: del(configMaps, "lab", "settings", nil, admin)},
		{name: "Always delete denied", policies: labels, req: del(configMaps, "lab", "settings", always, admin), denied: true},
		{name: "Always delete denied by a bare policy (floor)", policies: floor, req: del(configMaps, "lab", "settings", always, admin), denied: true},
		{name: "unconfirmed replica change denied", policies: labels, req: update(deployments, "lab", "web", explicit, explicit, 3, 0, "", admin), denied: true},
		{name: "confirmed replica change", policies: labels, req: update(deployments, "lab", "web", explicit, explicit, 3, 0, "0", admin)},
		{name: "update keeping the replicas", policies: labels, req: update(deployments, "lab", "web", explicit, explicit, 3, 3, "", admin)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := bc.req.Attributes()
			if got := bc.policies.Admit(b, a); got.Denied != bc.denied {
				b.Fatalf("%s, want denied=%v", got, bc.denied)
			}
			for b.Loop() {
				bc.policies.Admit(b, a)
			}
		})
	}
}
