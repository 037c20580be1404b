package admission

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// ObjectsPath admits Rampart's own objects: ChangeWindows (WindowSpec) and
// PodUnavailableBudgets (BudgetAdmission), by resource.
const ObjectsPath = "/validate/objects"

// Objects dispatches admission of Rampart's own objects by resource.
type Objects map[string]admission.Handler

// Handle implements admission.Handler.
func (o Objects) Handle(ctx context.Context, req admission.Request) admission.Response {
	if h, ok := o[req.Resource.Resource]; ok {
		return h.Handle(ctx, req)
	}
	return admission.Allowed("")
}

// coverageProbePrefix names the pod of a probe eviction: the budget
// webhook answers it with coverageProbeAnswer, so that an answer shows the
// API server calls the budget webhooks in that namespace.
const (
	coverageProbePrefix = "rampart-coverage-probe-"
	coverageProbeAnswer = "rampart coverage probe: budgets are judged in this namespace"
)

// isCoverageProbe is a probe eviction (see WaitBudgetCoverage).
func isCoverageProbe(req admission.Request) bool {
	return req.SubResource == "eviction" && strings.HasPrefix(req.Name, coverageProbePrefix)
}

// WaitBudgetCoverage returns once the API server calls the budget webhooks
// for pods of ns: it evicts, as a dry run, a pod that does not exist, which
// the API server hands to validating webhooks before it looks the pod up,
// until the budget webhook's answer comes back. Each probe has a new name,
// so that with several replicas any of them may answer.
func WaitBudgetCoverage(ctx context.Context, cs kubernetes.Interface, ns string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		name := coverageProbePrefix + utilrand.String(5)
		last = cs.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: name, Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
		})
		return last != nil && strings.Contains(last.Error(), coverageProbeAnswer), nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not call the budget webhooks in namespace %s yet (last probe: %v)", ns, last)
	}
	return nil
}

// BudgetAdmission admits a new PodUnavailableBudget only once every
// disruption of a pod in its namespace reaches the budget webhooks, so that
// the budget holds from the moment the API server stores it. Cover
// registers the namespace and waits until the API server enforces it.
type BudgetAdmission struct {
	Cover func(ctx context.Context, namespace string) error
}

// Handle implements admission.Handler.
func (h *BudgetAdmission) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Namespace == "" || dryRun(req) {
		return admission.Allowed("") // a dry run registers nothing
	}
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second) // inside the webhook's 10 s
	defer cancel()
	if err := h.Cover(ctx, req.Namespace); err != nil {
		return admission.Errored(http.StatusServiceUnavailable,
			fmt.Errorf("PodUnavailableBudget %s/%s is not stored: it could not be enforced yet (%w); retry", req.Namespace, req.Name, err))
	}
	return admission.Allowed("")
}
