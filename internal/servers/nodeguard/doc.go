// Package nodeguard is `rampart node-guard`: a CRI proxy between the
// kubelet (--container-runtime-endpoint) and the container runtime that
// refuses to end a pod labelled rampart.io/explicit-deletion=true unless
// the API asked for it.
//
// # Shape
//
// Functional core: Decide (decide.go) is a pure function of the call, a
// View and the clock. Imperative shell: the forwarder (frames.go) passes
// each kubelet connection to a runtime connection of its own, HTTP/2 frame
// by frame, whatever the service or method, reading only header blocks
// and the messages of the calls it intercepts; the
// Guard (guard.go, judge.go) intercepts StopPodSandbox, RemovePodSandbox,
// StopContainer and RemoveContainer, decodes their request to get the ID,
// builds the View from the runtime, the API and its memory of recent calls
// (memory.go), and forwards the original bytes or answers the refusal. It
// also watches RunPodSandbox and CreateContainer, whose request and answer
// say whose sandbox or container an ID is, to keep the index (index.go)
// current. NodePods (api.go) is the informer of this node's pods.
//
// # The rule
//
// A protected pod ends only if the API asked for it (a deletionTimestamp,
// on the pod or in the last state of a pod gone from the API), its spec
// ended it (activeDeadlineSeconds passed), or
// its own containers have finished (no regular container runs; the
// kubelet then stops the sidecars and the sandbox). A call that stops
// nothing running passes (garbage collection of exited containers and
// dead sandboxes, a repeated stop), and so does everything on a sandbox
// the runtime reports NOTREADY: the kubelet is replacing it
// (runtimeutil.PodSandboxChanged) and the pod carries on. Everything else
// that would stop a running process of a protected pod is refused, except
// a restart of one container that the pod's own spec asks for.
//
// # Telling a restart from a kill
//
// The kubelet says nothing of its reasons to the runtime: a StopContainer
// is a container ID and a timeout. What the guard can see, and how far it
// trusts it, after kuberuntime_manager.go (computePodActions, SyncPod,
// killPodWithSyncResult) and kuberuntime_container.go (killContainer,
// killContainersWithSyncResult) of Kubernetes v1.36:
//
//   - A restart stops one container and keeps the sandbox. SyncPod kills
//     its ContainersToKill one after the other, each call waiting for the
//     runtime. A kill of the pod (killPodWithSyncResult) stops every
//     running container at once, one goroutine each, then the sandbox. So
//     two StopContainer calls of one pod in the guard at the same time are
//     a kill (View.Concurrent), and so is a stop of the running sandbox.
//   - The kubelet restarts a running container for four reasons only: its
//     definition changed (the hash covers name and image, and image is the
//     only mutable one), a liveness probe failed, a startup probe failed, or
//     a resize needs a restart. The guard checks each against the API's
//     pod: the spec's image differs from the one the container was created
//     from (CRI user_specified_image, which the guard reads in the
//     CreateContainer request because containerd 1.6 does not report it
//     back); a resource whose resizePolicy is RestartContainer differs
//     between spec and status; the container has a startup probe and has
//     not started, or a liveness probe (and has started, if it has a
//     startup probe too). Image and resize are API facts and pass at once.
//   - A probe's result is the one thing the guard cannot see. A stop that
//     only a probe could explain is held for the settle window (2 s) and
//     judged again: a kill shows itself meanwhile by the sibling stops
//     arriving (several containers), or by the Failed phase the kubelet
//     writes before it kills a pod it rejects at admission or evicts
//     (SyncTerminatingPod sets the status, then calls killPod). A phase of
//     Failed or Succeeded while regular containers run is never a restart.
//   - A refused kill is remembered for a minute (View.KillSeen): the
//     kubelet retries it on each sync, and a probe-like stop of the same
//     pod meanwhile is part of it. A stop let through as a probe restart is
//     remembered until the kubelet creates the container again: a sandbox
//     stop in between means the "restart" was the first step of a kill
//     (View.RestartPassed), and the sandbox is kept.
//
// # A pod gone from the API
//
// The kubelet kills every pod the API no longer has, with a one-second
// grace period (its orphan cleanup, HandlePodCleanups). That is how a
// forced delete ends a pod, and how a damaged or restored API store (pods
// removed from etcd directly, a restore to an older snapshot) kills pods
// nobody deleted. The guard tells them apart by the pod's last state, which
// NodePods keeps for an hour (VanishedMemory) from the DELETE event of its
// watch, noted before its store drops the pod, or from the last state it
// had when a re-list no longer finds it. Every DELETE through the API
// server leaves a deletionTimestamp in that state: for pods the registry
// always takes the graceful path (pod CheckGracefulDelete), which with
// --grace-period=0 --force writes the timestamp, then removes the pod
// (k8s.io/apiserver Store.Delete, updateForGracefulDeletionAndFinalizers;
// TestPodDeletesLeaveADeletionTimestamp in internal/protection/admission watches it on
// the real API server). A store that loses a pod writes nothing first: the
// pod goes with no timestamp, and its kill is refused (VanishedFromAPI).
// The refusal's way out: restore the API's data (a restored pod keeps its
// UID, and the kubelet keeps running it), or, if the pod was meant to end,
// stop its sandbox on the runtime directly, past the guard (crictl
// --runtime-endpoint RUNTIME stopp ID); the kubelet then removes it.
//
// # Residual risk
//
//   - A one-container pod with a liveness or startup probe, killed by the
//     kubelet for a reason that leaves the API pod Running (an orphan
//     cleanup when the kubelet lost sight of a pod the API still has),
//     loses that container once: its stop passes as a probe restart. The
//     sandbox stop that follows is refused, so the pod keeps its sandbox
//     and IP, and the kubelet restarts the container once it sees the pod
//     again. With several containers the parallel stops give it away,
//     unless preStop hooks of different lengths spread them over more than
//     the settle window.
//   - preStop hooks run before each StopContainer attempt, including the
//     refused ones, and an HTTP hook never reaches the runtime: a hook that
//     drains or stops the application does so whatever the guard decides.
//   - An image change is seen only if the guard knows the image the
//     container was created from: from the CreateContainer it forwarded, or
//     from a runtime that reports user_specified_image. A container created
//     before the guard started, on a runtime that does not report it, gets
//     its image-change restart refused until it is deleted or unlabelled.
//   - RestartAllContainers (container restart rules, alpha) kills and
//     removes every container of a pod when one exits with a matching code;
//     the guard refuses it for protected pods.
//   - A sandbox that is READY but that the kubelet wants to replace (its
//     network namespace or IP changed) is not told apart: the replacement
//     is refused.
//   - Only the four calls are judged. UpdateContainerResources and exec
//     pass untouched.
//   - A pod that vanished while the guard was not watching (the guard
//     down or restarting, or its watch broken across the update that set
//     the deletionTimestamp) has no last state with a timestamp: if it was
//     created with the label its kill is refused, deleted on purpose or
//     not, until someone stops it with crictl as above. Fail closed.
//   - The kubelet and the guard watch the same API server, each on its
//     own connection: a kill of a pod removed from the store can arrive
//     before the guard's watch delivers the DELETE. It is refused as
//     NotAskedToEnd (the pod still in the guard's view), with an Event on
//     the pod that no longer exists; the kubelet's retry, a sync later,
//     is refused as VanishedFromAPI and reported on the Node. Seen once
//     in 24 pods in the orphaned-pods drill.
//   - Static pods (the kubelet's config source a file or a URL) are not
//     protected: the API's mirror pod has another UID, so the API has no
//     say on them, and their kills pass as those of pods not in the API.
//
// # When the API or the guard is away
//
// The API counts as unreachable when the informer has not synced, or its
// list and watch have failed for DefaultStaleAfter (10 s). Then a kill of a
// protected pod is refused with codes.Unavailable, restarts included,
// unless the cached pod, or the last state of a pod that left the API,
// already has a deletionTimestamp (never unset). A pod the cache has not seen is judged
// by its sandbox's labels, which are the pod's labels at creation; an
// unlabelled pod passes.
//
// The guard down is the runtime down to the kubelet: it cannot create or
// stop anything, and the running containers keep running.
//
// # The refusal
//
// Before a refusal of a pod the cache shows without a deletionTimestamp
// stands, the guard reads the pod from the API once (2 s at most): the
// kubelet watches the same pod and may act on a new deletionTimestamp
// before the guard's cache has it.
//
// codes.FailedPrecondition: the pod is not in the state the call needs
// (asked to end), and the call will work once it is (kubectl delete pod,
// or the label removed). The kubelet treats any error but NotFound as a
// failure to retry on the next sync (killContainer and
// killPodWithSyncResult ignore only crierror.IsNotFound), so it keeps
// trying and each try is judged afresh. codes.Unavailable when the API
// cannot be reached. The message names the call, the container or pod, why,
// and both ways to proceed (for a pod gone from the API, which kubectl can
// no longer delete or unlabel: restoring the API's data, or crictl stopp
// against the runtime's socket). Each refusal is also a Warning Event KillVetoed
// on the pod (action: the call), a rampart_nodeguard_vetoes_total{call,
// reason} increment and a log line. For a pod the API does not have, the
// Event is on the Node instead (kubectl describe node; namespace default),
// its related object and its note naming the pod: an Event about a pod
// that no longer exists shows in no kubectl describe, and its namespace
// may be gone too.
package nodeguard
