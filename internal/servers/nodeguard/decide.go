package nodeguard

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// Call is one of the four CRI calls that can end a pod. Every other call
// passes through without being looked at.
type Call string

const (
	StopPodSandbox   Call = "StopPodSandbox"
	RemovePodSandbox Call = "RemovePodSandbox"
	StopContainer    Call = "StopContainer"
	RemoveContainer  Call = "RemoveContainer"
)

func (c Call) sandbox() bool { return c == StopPodSandbox || c == RemovePodSandbox }

// PodRef names a pod as the kubelet labelled its sandbox and containers in
// the runtime (io.kubernetes.pod.*). A zero UID: the sandbox or container
// is not a Kubernetes pod's.
type PodRef struct {
	UID       types.UID
	Namespace string
	Name      string
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// View is what the guard knows when a call arrives: the runtime's live
// state of the target, the API's pod, and the guard's memory of this pod's
// recent calls. The shell (guard.go) builds it; Decide only reads it.
type View struct {
	// From the runtime, read when the call arrives.
	Pod PodRef
	// Container is the target container's name (container calls).
	Container string
	// Running: the call would stop a running process. A container call's
	// target is RUNNING; a sandbox call's sandbox has a RUNNING container.
	Running bool
	// SandboxReady: the pod's sandbox is READY. A NOTREADY sandbox is one
	// the kubelet replaces (runtimeutil.PodSandboxChanged): stopping it and
	// its containers is how the pod recovers, not how it ends.
	SandboxReady bool
	// RegularRunning: a regular container of the pod runs (not a sidecar,
	// that is a restartable init container). Only sidecars left: the pod's
	// own containers have finished, and the kubelet stops the sidecars and
	// the sandbox because the pod is done.
	RegularRunning bool
	// RuntimeProtected: the sandbox's labels, which are the pod's labels
	// when it was created, carry the label. Read only when the API cannot
	// be asked about a pod the guard has not seen.
	RuntimeProtected bool
	// CreatedImage is the image the running container was created from,
	// as the pod spec named it (CRI user_specified_image, seen in the
	// CreateContainer request or reported by the runtime); "" unknown.
	CreatedImage string

	// From the API (an informer of this node's pods).
	APIReachable bool
	// APIProblem says why the API is not reachable.
	APIProblem string
	// APIPod is the pod with the runtime's UID; nil: not in the API (or
	// not seen, when the API is unreachable).
	APIPod *corev1.Pod
	// LastSeen is the pod as the guard's informer last saw it before it
	// vanished from the API (its DELETE event, or the last state known
	// when a re-list no longer had it); nil when APIPod is set or the
	// guard never saw the pod.
	LastSeen *corev1.Pod
	// RuntimeEndpoint is the runtime's CRI endpoint, named in the way out
	// of a refusal for a pod the API no longer has.
	RuntimeEndpoint string

	// From the guard's memory of this pod's calls.
	//
	// Concurrent: another container of the pod was being stopped while
	// this call was in the guard. The kubelet stops containers one after
	// the other when it restarts them (SyncPod), and all at once when it
	// kills the pod (killContainersWithSyncResult).
	Concurrent bool
	// KillSeen: a call that only a kill of the whole pod makes (a stop of
	// a running container with no restart reason, or of the running
	// sandbox) came for this pod within the guard's memory.
	KillSeen bool
	// RestartPassed: the guard let a container of this pod stop as a
	// probe restart and the kubelet has not created its successor.
	RestartPassed bool
	// Settled: the call was held for the settle window and this is the
	// second look.
	Settled bool
}

// Verdict is Decide's answer: the verdict, its Reason a short CamelCase
// name for logs, metrics and Events, its Message why and what to do (a
// refusal's is the gRPC message); a refusal is Forbidden, or Unavailable
// when the guard cannot learn what it needs (grpcCode maps them).
type Verdict struct {
	verdict.Verdict
	// Hold: allow only if a second look after the settle window, with the
	// evidence gathered meanwhile, allows it too.
	Hold bool
}

// Reasons.
const (
	ReasonNotAPod          = "NotAPod"
	ReasonNothingRunning   = "NothingRunning"
	ReasonSandboxNotReady  = "SandboxNotReady"
	ReasonNotInAPI         = "NotInAPI"
	ReasonVanished         = "VanishedFromAPI"
	ReasonNotProtected     = "NotProtected"
	ReasonDeletionAsked    = "DeletionTimestamp"
	ReasonPodCompleted     = "PodCompleted"
	ReasonActiveDeadline   = "ActiveDeadlineExceeded"
	ReasonImageChanged     = "ImageChanged"
	ReasonResizeRestart    = "ResizeRestart"
	ReasonProbeRestart     = "ProbeRestart"
	ReasonAPIUnreachable   = "APIUnreachable"
	ReasonNotAskedToEnd    = "NotAskedToEnd"
	ReasonPodKill          = "PodKill"
	ReasonKubeletEndedPod  = "KubeletMarkedTerminal"
	ReasonUndecodable      = "Undecodable"
	ReasonRuntimeUnclear   = "RuntimeStatusFailed"
	reasonRestartThenStop  = "SandboxStopAfterRestart"
	reasonConcurrentStops  = "ConcurrentStops"
	reasonKillSeenRecently = "PodKillSeen"
)

// Decide decides whether call may reach the runtime, from v at now.
//
// The rule (see the package doc for why each signal is trusted): a pod
// labelled rampart.io/explicit-deletion=true in the API ends only when the
// API asked for it (deletionTimestamp; for a pod that vanished from the
// API, one in its last state), when its own spec ends it (activeDeadlineSeconds), or when its
// own containers have finished. One of its containers may still be
// restarted when its spec asks for it: the image changed, a resize needs a
// restart, or a liveness or startup probe may have failed. Everything else
// that would stop a running process of such a pod is refused, and so is
// all of it when the API cannot be reached.
func Decide(call Call, v View, now time.Time) Verdict {
	if v.Pod.UID == "" {
		return allow(ReasonNotAPod, "not a Kubernetes pod's")
	}
	// A ready sandbox whose container the guard let stop as a probe
	// restart is between two runs of that container, not finished.
	between := call.sandbox() && v.SandboxReady && v.RestartPassed
	if !v.Running && !between {
		// Garbage collection of exited containers and dead sandboxes, a
		// second stop: nothing that runs is ended.
		return allow(ReasonNothingRunning, "nothing of it is running")
	}
	if !v.SandboxReady {
		return allow(ReasonSandboxNotReady, "its sandbox is not ready: the kubelet replaces it and restarts the containers")
	}
	pod := v.APIPod
	switch {
	case pod == nil && v.LastSeen != nil:
		return vanished(call, v)
	case pod == nil && v.APIReachable:
		// Gone before this guard could see it go (it started since):
		// judged by the labels the pod was created with.
		if !v.RuntimeProtected {
			return allow(ReasonNotInAPI, "the pod is no longer in the API and was not labelled "+v1alpha1.LabelExplicitDeletion+"=true when created")
		}
		return refuseVanished(call, v, "the pod is not in the API and this node guard did not see it go, so nothing shows that it was deleted through the API")
	case pod == nil:
		if !v.RuntimeProtected {
			return allow(ReasonNotProtected, "not labelled "+v1alpha1.LabelExplicitDeletion+"=true when created, and the API cannot be asked")
		}
	case pod.Labels[v1alpha1.LabelExplicitDeletion] != "true":
		return allow(ReasonNotProtected, "not labelled "+v1alpha1.LabelExplicitDeletion+"=true")
	}
	// From here the pod is protected.
	if pod != nil && pod.DeletionTimestamp != nil {
		// Never unset once set, so a cached one holds even when the API
		// cannot be reached.
		return allow(ReasonDeletionAsked, "the API asked for the pod to end (deletionTimestamp)")
	}
	if !v.APIReachable {
		problem := ""
		if v.APIProblem != "" {
			problem = " (" + v.APIProblem + ")"
		}
		return refuse(call, v, ReasonAPIUnreachable, verdict.Unavailable,
			"the node guard cannot reach the API server"+problem+" to learn whether the pod was deleted; the kubelet retries, and a deleted pod ends once the API server is reachable again")
	}
	if pastActiveDeadline(pod, now) {
		return allow(ReasonActiveDeadline, "the pod's activeDeadlineSeconds has passed")
	}
	if between && pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		// After a probe restart the kubelet starts the container again in
		// the same sandbox; stopping the sandbox instead means the stop
		// the guard took for a restart was the first step of a kill.
		return refuse(call, v, reasonRestartThenStop, verdict.Forbidden,
			"the kubelet is stopping the sandbox right after a container stop the node guard let through as a probe restart, so it is killing the pod, not restarting a container, and the API has not asked for the pod to end")
	}
	if !v.RegularRunning {
		// Only sidecars run, or nothing: the pod's own containers have
		// finished and the kubelet ends the rest because the pod is done.
		return allow(ReasonPodCompleted, "its regular containers have finished")
	}
	if call.sandbox() {
		return refuse(call, v, ReasonNotAskedToEnd, verdict.Forbidden, notAsked)
	}
	if call == RemoveContainer {
		// The kubelet stops a container before removing it; removing a
		// running one is never a restart.
		return refuse(call, v, ReasonNotAskedToEnd, verdict.Forbidden, notAsked)
	}

	// StopContainer of a running container of a protected pod whose
	// sandbox stays: a restart if the spec asks for one, a kill otherwise.
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return refuse(call, v, ReasonKubeletEndedPod, verdict.Forbidden, fmt.Sprintf(
			"the kubelet marked the pod %s%s while its containers run (a rejection at admission or an eviction), and the API has not asked for it to end",
			pod.Status.Phase, reasonSuffix(pod.Status.Reason)))
	}
	if v.Concurrent {
		return refuse(call, v, reasonConcurrentStops, verdict.Forbidden,
			"the kubelet is stopping several containers of the pod at once, which it does only to kill the pod (a restart stops one at a time), and the API has not asked for the pod to end")
	}
	if v.KillSeen {
		return refuse(call, v, reasonKillSeenRecently, verdict.Forbidden,
			"the kubelet tried to kill this pod moments ago, so this stop is part of that kill, and the API has not asked for the pod to end")
	}
	reason, why := restartReason(pod, v.Container, v.CreatedImage)
	switch {
	case reason == "":
		return refuse(call, v, ReasonNotAskedToEnd, verdict.Forbidden, notAsked+
			"; nothing in the container's spec asks for a restart (no image change, no resize needing one, no liveness or startup probe)")
	case reason == ReasonProbeRestart && !v.Settled:
		return Verdict{Verdict: verdict.Verdict{Allowed: true, Reason: reason, Message: why}, Hold: true}
	}
	return allow(reason, why)
}

const notAsked = "the API has not asked for the pod to end (no deletionTimestamp)"

// vanished decides for a pod that left the API while the guard watched,
// from its last seen state. Every DELETE through the API leaves a
// deletionTimestamp there: the API server's registry writes it before it
// removes a pod, a forced delete (--grace-period=0 --force) and the
// kubelet's own final delete included (a pod's CheckGracefulDelete always
// takes the graceful path, which with a zero grace period updates the pod,
// then deletes it: k8s.io/apiserver registry Store.Delete,
// updateForGracefulDeletionAndFinalizers), and the DELETE event carries
// that state. A pod removed from the store directly (etcd data lost or
// restored to an older snapshot, a key deleted by hand) has none, and the
// kubelet's orphan cleanup would kill it.
func vanished(call Call, v View) Verdict {
	last := v.LastSeen
	switch {
	case last.Labels[v1alpha1.LabelExplicitDeletion] != "true":
		return allow(ReasonNotProtected, "the pod is no longer in the API and was not labelled "+v1alpha1.LabelExplicitDeletion+"=true when last seen")
	case last.DeletionTimestamp != nil:
		return allow(ReasonDeletionAsked, "the pod was deleted through the API (its last state has a deletionTimestamp)")
	}
	return refuseVanished(call, v, "the pod vanished from the API without a deletionTimestamp in its last state, which no DELETE through the API leaves: "+
		"the API's store lost it (etcd data lost or restored to an older snapshot, a key removed by hand), and the kubelet kills such orphans")
}

// refuseVanished is the refusal for a protected pod the API no longer
// has: kubectl cannot delete or unlabel it, so the way out is to put it
// back in the API (the kubelet then keeps it only if it has the same UID,
// as an etcd restore gives it) or to end it on the runtime directly,
// past the guard.
func refuseVanished(call Call, v View, why string) Verdict {
	target := "pod " + v.Pod.String()
	if !call.sandbox() && v.Container != "" {
		target = fmt.Sprintf("container %q of pod %s", v.Container, v.Pod)
	}
	rt := v.RuntimeEndpoint
	if rt == "" {
		rt = "<the runtime's socket, the node guard's --runtime-endpoint>"
	}
	msg := fmt.Sprintf("rampart node-guard refused %s of %s (uid %s), labelled %s=true: %s. "+
		"If the pod was meant to end, stop it on the runtime directly, past the guard: "+
		"crictl --runtime-endpoint %s pods --label io.kubernetes.pod.uid=%s -q | xargs -r crictl --runtime-endpoint %s stopp; "+
		"the kubelet then removes it. Otherwise restore the API's data (a restored pod keeps its UID and the kubelet keeps running it)",
		call, target, v.Pod.UID, v1alpha1.LabelExplicitDeletion, why, rt, v.Pod.UID, rt)
	return Verdict{Verdict: verdict.Verdict{Reason: ReasonVanished, Message: msg, Refusal: verdict.Forbidden}}
}

func allow(reason, why string) Verdict {
	return Verdict{Verdict: verdict.Verdict{Allowed: true, Reason: reason, Message: why}}
}

// refuse builds the refusal the kubelet sees (and logs, and retries on its
// next sync): the call, the pod, why, and the two ways to proceed.
func refuse(call Call, v View, reason string, kind verdict.Refusal, why string) Verdict {
	target := "pod " + v.Pod.String()
	if !call.sandbox() && v.Container != "" {
		target = fmt.Sprintf("container %q of pod %s", v.Container, v.Pod)
	}
	ns, name := v.Pod.Namespace, v.Pod.Name
	msg := fmt.Sprintf("rampart node-guard refused %s of %s, labelled %s=true: %s. "+
		"To end the pod: kubectl delete pod -n %s %s. "+
		"To let the kubelet end it without a delete: kubectl label pod -n %s %s %s-",
		call, target, v1alpha1.LabelExplicitDeletion, why, ns, name, ns, name, v1alpha1.LabelExplicitDeletion)
	return Verdict{Verdict: verdict.Verdict{Reason: reason, Message: msg, Refusal: kind}}
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

// pastActiveDeadline is the kubelet's own test (kubelet_pods.go
// pastActiveDeadline): the pod's spec ends it.
func pastActiveDeadline(pod *corev1.Pod, now time.Time) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil || pod.Status.StartTime == nil {
		return false
	}
	return now.Sub(pod.Status.StartTime.Time) >= time.Duration(*pod.Spec.ActiveDeadlineSeconds)*time.Second
}

// restartReason says why the pod's spec may ask the kubelet to restart the
// named container, "" if it cannot. These are the kubelet's reasons to kill
// one container and keep the pod (computePodActions): the container's
// definition changed (only its image can change in a pod), a resize needs a
// restart, a liveness or startup probe failed.
func restartReason(pod *corev1.Pod, name, createdImage string) (reason, why string) {
	c, sidecar := specContainer(pod, name)
	if c == nil {
		// An ephemeral container, a plain init container or a name the
		// spec does not have: the kubelet restarts none of them alone.
		return "", ""
	}
	if !sidecar && containerIsInit(pod, name) {
		return "", ""
	}
	if createdImage != "" && c.Image != createdImage {
		return ReasonImageChanged, fmt.Sprintf("the spec's image is %s, the container runs %s", c.Image, createdImage)
	}
	st := containerStatus(pod, name)
	if r := resizeNeedsRestart(c, st); r != "" {
		return ReasonResizeRestart, "a resize of " + r + " needs a restart (resizePolicy RestartContainer)"
	}
	started := st != nil && st.Started != nil && *st.Started
	switch {
	case c.StartupProbe != nil && !started:
		return ReasonProbeRestart, "the container has a startup probe and has not started: the probe may have failed"
	case c.LivenessProbe != nil && (c.StartupProbe == nil || started):
		return ReasonProbeRestart, "the container has a liveness probe: it may have failed"
	}
	return "", ""
}

// specContainer finds the named container among the pod's containers and
// its sidecars (init containers with restartPolicy Always, which may have
// probes).
func specContainer(pod *corev1.Pod, name string) (c *corev1.Container, sidecar bool) {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i], false
		}
	}
	for i := range pod.Spec.InitContainers {
		ic := &pod.Spec.InitContainers[i]
		if ic.Name == name {
			return ic, IsSidecar(ic)
		}
	}
	return nil, false
}

func containerIsInit(pod *corev1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return true
		}
	}
	return false
}

// IsSidecar says whether an init container is a sidecar (restartPolicy
// Always): it runs beside the regular containers and is stopped after
// them.
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// resizeNeedsRestart names the resources whose desired value (the spec)
// differs from what the container runs with (its status) where the
// container's resizePolicy says RestartContainer; "" if none.
func resizeNeedsRestart(c *corev1.Container, st *corev1.ContainerStatus) string {
	if st == nil || st.Resources == nil {
		return ""
	}
	var changed []string
	for _, p := range c.ResizePolicy {
		if p.RestartPolicy != corev1.RestartContainer {
			continue
		}
		if !quantityEqual(c.Resources.Requests, st.Resources.Requests, p.ResourceName) ||
			!quantityEqual(c.Resources.Limits, st.Resources.Limits, p.ResourceName) {
			changed = append(changed, string(p.ResourceName))
		}
	}
	return strings.Join(changed, ", ")
}

func quantityEqual(a, b corev1.ResourceList, name corev1.ResourceName) bool {
	qa, oka := a[name]
	qb, okb := b[name]
	if !oka || !okb {
		return oka == okb
	}
	return qa.Cmp(qb) == 0
}
