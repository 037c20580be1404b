package compiled

import (
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// SavedPodsName is the policy that keeps a pod the node guard saved
// reading Running and Ready: it refuses a node's status write that turns a
// pod labelled rampart.io/explicit-deletion=true Failed, or not Ready as a
// failed pod, while the node guard reports its containers running.
const SavedPodsName = "saved-pods.rampart.io"

// SavedPods compiles the saved-pods rule (SavedPodsName).
//
// What it fixes: a kubelet that rejects a running pod at re-admission
// (after a restart on a node whose labels changed), evicts it (node
// pressure) or shuts down writes phase Failed, then kills the containers.
// The node guard refuses the kill of a protected pod, so its containers
// run on, but a Failed pod leaves its Service's EndpointSlices, its
// ReplicaSet replaces it, and Failed is final: once the operator fixes
// the node the pod stays Failed though it runs. Refusing the write keeps
// the API's reading (Running, Ready as last reported) true to what runs.
//
// Seen on a real kubelet (v1.36): a rejected pod is not written Failed
// while its containers run (the status manager holds a terminal phase
// back until they stop, and the guard refuses the kill), but its Ready
// and ContainersReady conditions are written False with reason PodFailed,
// and before that, at the rejection, its status is written without its
// Ready condition and container statuses at all: either takes it out of
// its Service's ready endpoints just the same. So the policy refuses those
// writes too: Ready turning False with reason PodFailed, or dropped. A
// readiness probe that fails writes reason
// ContainersNotReady and passes, so a sick pod still leaves its
// endpoints. A kubelet that rejected a pod runs no probes for it: the
// Ready the API keeps is the last its probes gave, until the node is
// fixed and the kubelet probes the pod again.
//
// Why it is sound: the API server cannot see the runtime, and the
// kubelet's write carries no evidence either way (a rejected pod's status
// has no container statuses; an evicted pod's is written before the
// kill). So the policy refuses Failed only on the evidence of the one
// component that sees the containers and decides whether they stop: the
// node guard's condition rampart.io/ContainersRunning=True on the pod as
// it stands before the write (oldObject, which the node's write cannot
// forge into the past). The guard keeps it True only while the runtime
// runs a regular container of the pod, and turns it False within its
// resync period (nodeguard.DefaultVouchEvery, 5 s) once none runs: a
// kill it let through (activeDeadlineSeconds), containers that exited on
// their own. The kubelet retries a refused status write every 10 s, so a
// pod whose containers really ended reads Failed some 15 s late at most.
// A node without the guard never has the condition, and its pods turn
// Failed as before.
//
// Left out, so the kubelet's word stands: pods with a deletionTimestamp
// (the API asked), restartPolicy OnFailure or Never (their containers'
// exit legitimately ends them), pods already terminal, and writes by
// anyone but a node (the node lifecycle controller marking a pod not
// Ready on an unreachable node, the pod GC).
//
// The refusal reaches the kubelet as the status manager's "Failed to
// update status for pod" error with this message, retried every 10 s;
// the API server counts it in
// apiserver_validating_admission_policy_check_total{policy="saved-pods.rampart.io",enforcement_action="deny"}.
func SavedPods(o Options) Policy {
	sp := newPolicy(SavedPodsName, SourceLabels, []admissionregistrationv1.NamedRuleWithOperations{
		namedRule(admissionregistrationv1.Update, []string{""}, []string{"pods/status"}),
	}, o.notOwn(nil))
	sp.Policy.Spec.MatchConstraints.ObjectSelector = labelIn(v1alpha1.LabelExplicitDeletion, "true")
	sp.Policy.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: "by-a-node", Expression: `request.userInfo.username.startsWith("system:node:")`},
		{Name: "ends-the-pod", Expression: `!(has(oldObject.status.phase) && oldObject.status.phase in ["Failed", "Succeeded"]) && (` +
			turnsFailed + ` || ` + readyAsFailed("object") + ` && !` + readyAsFailed("oldObject") + `)`},
		{Name: "not-deleted", Expression: `!has(object.metadata.deletionTimestamp)`},
		{Name: "restarts-always", Expression: `!has(object.spec.restartPolicy) || object.spec.restartPolicy == "Always"`},
	}
	cond := strconv.Quote(v1alpha1.ConditionContainersRunning)
	sp.Policy.Spec.Variables = append(sp.Policy.Spec.Variables,
		admissionregistrationv1.Variable{Name: "containersRunning", Expression: `has(oldObject.status.conditions) && ` +
			`oldObject.status.conditions.exists(c, c.type == ` + cond + ` && c.status == "True")`},
		admissionregistrationv1.Variable{Name: "node", Expression: `request.userInfo.username.substring(12)`},
		admissionregistrationv1.Variable{Name: "why", Expression: turnsFailed + ` ? "Failed (" + (has(object.status.reason) ? object.status.reason : "no reason given") + ")" : ` +
			`"not Ready as a failed pod (" + (has(object.status.conditions) && object.status.conditions.exists(c, c.type == "Ready") ? ` +
			`"Ready=False, reason ` + podFailedReason + `" : "its Ready condition and container statuses dropped") + ")"`},
	)
	sp.Policy.Spec.Validations = []admissionregistrationv1.Validation{{
		Expression: "!variables.containersRunning",
		Reason:     ptr.To(metav1.StatusReasonForbidden),
		MessageExpression: `"node " + variables.node + " may not turn " + ` + celObj + ` + " " + variables.why + ": ` +
			`rampart node-guard reports its containers running (condition ` + v1alpha1.ConditionContainersRunning + `=True) and refuses to stop them unless the API asks, ` +
			`so the pod keeps reading Running and serving. If it is meant to end, delete it: kubectl delete pod " + ` + celNs + ` + variables.name + ` +
			`", or let it end on the node: kubectl label pod " + ` + celNs + ` + variables.name + " ` + v1alpha1.LabelExplicitDeletion + `-"`,
	}}
	return sp
}

// podFailedReason is the reason the kubelet gives the pod's Ready and
// ContainersReady conditions when it has ended the pod (k8s.io/kubernetes
// pkg/kubelet/status, PodFailed). A readiness probe that fails gives
// ContainersNotReady instead, so the two are told apart.
const podFailedReason = "PodFailed"

// turnsFailed is the CEL saying the write makes the pod's phase Failed.
const turnsFailed = `(has(object.status.phase) && object.status.phase == "Failed")`

// readyAsFailed is the CEL saying obj reads not Ready as a pod the
// kubelet ended: its Ready condition False with reason podFailedReason,
// or gone (the status the kubelet writes for a pod it rejects carries no
// condition and no container status of its own).
func readyAsFailed(obj string) string {
	return `!(has(` + obj + `.status.conditions) && ` + obj + `.status.conditions.exists(c, c.type == "Ready" && ` +
		`!(c.status == "False" && has(c.reason) && c.reason == "` + podFailedReason + `")))`
}
