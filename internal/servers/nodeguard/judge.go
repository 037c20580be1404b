package nodeguard

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// EventReason is the reason of the Warning Event a refusal leaves on the
// pod.
const EventReason = "KillVetoed"

// intercept is the forwarder's hook for the methods New lists: the four
// pod-ending calls are judged, the two creating ones are watched to keep
// the index current.
func (g *Guard) intercept(ctx context.Context, method string, req []byte) (func([]byte, error), error) {
	switch method {
	case runtimeapi.RuntimeService_RunPodSandbox_FullMethodName:
		return g.observeRunPodSandbox(req), nil
	case runtimeapi.RuntimeService_CreateContainer_FullMethodName:
		return g.observeCreateContainer(req), nil
	}
	call, id, err := decodeCall(method, req)
	if err != nil {
		// Not forwarded: the guard cannot know what it would end, and a
		// request it cannot decode the runtime cannot either.
		g.o.Metrics.vetoes.WithLabelValues(string(call), ReasonUndecodable).Inc()
		g.o.Log.Warn("node guard: refused an undecodable pod-ending call", "call", call, "err", err)
		return nil, status.Errorf(codes.InvalidArgument, "rampart node-guard could not decode the %s request (%v); it was not forwarded to the runtime", call, err)
	}
	return g.judge(ctx, call, id)
}

func decodeCall(method string, req []byte) (Call, string, error) {
	switch method {
	case runtimeapi.RuntimeService_StopPodSandbox_FullMethodName:
		r := &runtimeapi.StopPodSandboxRequest{}
		err := unmarshal(req, r)
		return StopPodSandbox, r.GetPodSandboxId(), err
	case runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName:
		r := &runtimeapi.RemovePodSandboxRequest{}
		err := unmarshal(req, r)
		return RemovePodSandbox, r.GetPodSandboxId(), err
	case runtimeapi.RuntimeService_StopContainer_FullMethodName:
		r := &runtimeapi.StopContainerRequest{}
		err := unmarshal(req, r)
		return StopContainer, r.GetContainerId(), err
	case runtimeapi.RuntimeService_RemoveContainer_FullMethodName:
		r := &runtimeapi.RemoveContainerRequest{}
		err := unmarshal(req, r)
		return RemoveContainer, r.GetContainerId(), err
	}
	return Call(method), "", fmt.Errorf("%s is not a pod-ending call", method)
}

func unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }

// target is what the runtime says of the ID a call names.
type target struct {
	// id is the runtime's full ID (a runtime may accept a unique prefix).
	id string
	// gone: the runtime has no such ID; it answers the call itself.
	gone     bool
	view     View
	siblings []*runtimeapi.Container
}

// grpcCode is the gRPC code a refusal of kind r is answered with: the
// kubelet retries either at its next sync. Unavailable when the guard
// could not learn what it needed, FailedPrecondition otherwise: the pod's
// state does not let the call through. Never NotFound: the kubelet takes
// NotFound from StopContainer and StopPodSandbox as success.
func grpcCode(r verdict.Refusal) codes.Code {
	if r == verdict.Unavailable {
		return codes.Unavailable
	}
	return codes.FailedPrecondition
}

// judge decides one pod-ending call and reports a refusal.
func (g *Guard) judge(ctx context.Context, call Call, id string) (func([]byte, error), error) {
	now := g.o.Now()
	t, err := g.target(ctx, call, id)
	if err != nil {
		v := Verdict{Verdict: verdict.Verdict{Reason: ReasonRuntimeUnclear, Refusal: verdict.Unavailable, Message: fmt.Sprintf(
			"rampart node-guard refused %s of %s: it could not read the runtime's state of it (%v), so it cannot tell whether this ends a protected pod; the kubelet retries",
			call, id, err)}}
		g.record(call, View{}, v, now)
		return nil, status.Error(grpcCode(v.Refusal), v.Message)
	}
	if t.gone {
		return nil, nil
	}
	view := t.view
	var sc *stopCall
	end := func() {}
	if call == StopContainer && view.Pod.UID != "" && view.Running {
		sc, end = g.memory.beginStop(view.Pod.UID, t.id, now)
	}
	g.fillAPI(&view, t.siblings, sc, now)
	v := Decide(call, view, now)
	if v.Hold {
		select {
		case <-time.After(g.o.Settle):
		case <-ctx.Done():
			end()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		now = g.o.Now()
		view.Settled = true
		g.fillAPI(&view, t.siblings, sc, now)
		v = Decide(call, view, now)
	}
	if !v.Allowed && view.APIPod != nil && view.APIPod.DeletionTimestamp == nil {
		v = g.lookAgain(ctx, call, &view, v, now)
	}
	g.record(call, view, v, now)
	if !v.Allowed {
		end()
		return nil, status.Error(grpcCode(v.Refusal), v.Message)
	}
	return func(_ []byte, err error) {
		end()
		if err == nil && (call == RemoveContainer || call == RemovePodSandbox) {
			g.index.drop(t.id)
		}
	}, nil
}

// lookAgain reads the pod from the API before a refusal stands: the
// kubelet and the guard watch the same pod, and the kubelet may act on
// its deletionTimestamp before the guard's cache has it. A kill the API
// asked for would be refused, and the kubelet would try again only at its
// next sync (seconds, under load tens of seconds): kubectl delete pod of a
// protected pod would be slow. Refusals are rare, so one GET each costs
// little; if the read fails the refusal stands.
func (g *Guard) lookAgain(ctx context.Context, call Call, view *View, v Verdict, now time.Time) Verdict {
	fp, ok := g.o.Pods.(FreshPods)
	if !ok {
		return v
	}
	p, err := fp.Fresh(ctx, view.APIPod.Namespace, view.APIPod.Name)
	if err != nil || p.UID != view.APIPod.UID || p.DeletionTimestamp == nil {
		return v
	}
	view.APIPod = p
	return Decide(call, *view, now)
}

// target asks the runtime about the ID a call names.
func (g *Guard) target(ctx context.Context, call Call, id string) (target, error) {
	if call.sandbox() {
		return g.sandboxTarget(ctx, id)
	}
	return g.containerTarget(ctx, id)
}

func (g *Guard) sandboxTarget(ctx context.Context, id string) (target, error) {
	st, err := g.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if status.Code(err) == codes.NotFound {
		return target{gone: true}, nil
	}
	if err != nil {
		return target{}, err
	}
	full := st.GetStatus().GetId()
	if full == "" {
		full = id
	}
	e := sandboxEntry(st.GetStatus().GetLabels())
	if e.Pod.UID == "" {
		return target{id: full}, nil // not a pod's: View.Pod stays zero
	}
	g.index.put(full, e)
	sibs, err := g.sandboxContainers(ctx, full)
	if err != nil {
		return target{}, err
	}
	v := View{Pod: e.Pod, SandboxReady: st.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY, RuntimeProtected: runtimeProtected(st.GetStatus())}
	for _, c := range sibs {
		v.Running = v.Running || c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return target{id: full, view: v, siblings: sibs}, nil
}

func (g *Guard) containerTarget(ctx context.Context, id string) (target, error) {
	e, known := g.index.get(id)
	full := id
	if !known {
		// A miss: an ID created before the index was built, or a prefix.
		l, err := g.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
		if err != nil {
			return target{}, err
		}
		if len(l.GetContainers()) != 1 {
			return target{gone: true}, nil // none, or a prefix of several: the runtime refuses it itself
		}
		c := l.GetContainers()[0]
		full, e = c.GetId(), containerEntry(c)
		if e.Pod.UID == "" {
			return target{id: full}, nil
		}
		g.index.put(full, e)
	}
	sibs, err := g.sandboxContainers(ctx, e.SandboxID)
	if err != nil {
		return target{}, err
	}
	var self *runtimeapi.Container
	for _, c := range sibs {
		if c.GetId() == full {
			self = c
		}
	}
	if self == nil {
		return target{gone: true}, nil
	}
	v := View{Pod: e.Pod, Container: e.Container, Running: self.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING,
		CreatedImage: e.CreatedImage}
	if v.CreatedImage == "" {
		v.CreatedImage = self.GetImage().GetUserSpecifiedImage()
	}
	st, err := g.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: e.SandboxID})
	switch {
	case status.Code(err) == codes.NotFound:
		// A container without its sandbox: nothing for the kubelet to keep.
	case err != nil:
		return target{}, err
	default:
		v.SandboxReady = st.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
		v.RuntimeProtected = runtimeProtected(st.GetStatus())
	}
	return target{id: full, view: v, siblings: sibs}, nil
}

// runtimeProtected says whether a sandbox's pod was created with the
// label, from the API: a static pod (the kubelet's config source is a file
// or a URL, kept in the sandbox's annotations) is the kubelet's own, and
// the API's mirror of it has another UID, so the API never has a say on
// it and it is not judged by its labels.
func runtimeProtected(st *runtimeapi.PodSandboxStatus) bool {
	switch st.GetAnnotations()[configSource] {
	case "", "api":
		return sandboxEntry(st.GetLabels()).Protected
	}
	return false
}

// configSource is the kubelet's annotation saying where a pod came from
// (k8s.io/kubernetes/pkg/kubelet/types.ConfigSourceAnnotationKey).
const configSource = "kubernetes.io/config.source"

func (g *Guard) sandboxContainers(ctx context.Context, sandboxID string) ([]*runtimeapi.Container, error) {
	l, err := g.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID}})
	if err != nil {
		return nil, err
	}
	return l.GetContainers(), nil
}

// fillAPI adds to v what the API and the guard's memory say now.
func (g *Guard) fillAPI(v *View, siblings []*runtimeapi.Container, sc *stopCall, now time.Time) {
	if v.Pod.UID == "" {
		return
	}
	// What left the API first: the watch says so before the informer's
	// store drops the pod.
	v.LastSeen = g.o.Pods.Vanished(v.Pod.UID)
	v.APIPod = nil
	if v.LastSeen == nil {
		v.APIPod = g.o.Pods.Pod(v.Pod.UID)
	}
	v.APIReachable, v.APIProblem = g.o.Pods.Reachable(now)
	v.RuntimeEndpoint = g.o.Runtime
	v.KillSeen = g.memory.killSeen(v.Pod.UID, now)
	v.RestartPassed = g.memory.restartPassed(v.Pod.UID, now)
	v.Concurrent = sc != nil && g.memory.concurrent(sc)
	v.RegularRunning = false
	for _, c := range siblings {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING && !sidecarNamed(v.APIPod, containerName(c.GetLabels(), c.GetMetadata())) {
			v.RegularRunning = true
		}
	}
}

func sidecarNamed(pod *corev1.Pod, name string) bool {
	if pod == nil {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return IsSidecar(&pod.Spec.InitContainers[i])
		}
	}
	return false
}

// killEvidence are the refusals that only a kill of the whole pod causes.
var killEvidence = map[string]bool{
	ReasonNotAskedToEnd: true, ReasonKubeletEndedPod: true, reasonConcurrentStops: true,
	reasonKillSeenRecently: true, reasonRestartThenStop: true,
}

// quiet are the passes not worth a log line: not a protected pod's call.
var quiet = map[string]bool{ReasonNotAPod: true, ReasonNothingRunning: true, ReasonNotProtected: true}

// record counts, logs, remembers and, for a refusal, leaves an Event.
func (g *Guard) record(call Call, v View, decided Verdict, now time.Time) {
	attrs := []any{"call", call, "pod", v.Pod.String(), "podUID", v.Pod.UID, "reason", decided.Reason}
	if v.Container != "" {
		attrs = append(attrs, "container", v.Container)
	}
	if decided.Allowed {
		g.o.Metrics.passes.WithLabelValues(string(call), decided.Reason).Inc()
		if decided.Reason == ReasonProbeRestart {
			g.memory.passedRestart(v.Pod.UID, v.Container, now)
		}
		if !quiet[decided.Reason] {
			g.o.Log.Info("node guard: let a pod-ending call through", append(attrs, "why", decided.Message)...)
		}
		return
	}
	g.o.Metrics.vetoes.WithLabelValues(string(call), decided.Reason).Inc()
	g.o.Log.Warn("node guard: refused a pod-ending call", append(attrs, "code", grpcCode(decided.Refusal).String(), "message", decided.Message)...)
	if v.Pod.UID == "" {
		return
	}
	if killEvidence[decided.Reason] {
		g.memory.sawKill(v.Pod.UID, now)
	}
	if g.o.Recorder != nil {
		pod := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: v.Pod.Namespace, Name: v.Pod.Name, UID: v.Pod.UID}
		if v.APIPod == nil && g.o.Node != "" {
			// The pod is not in the API: the Event goes on the Node, with
			// the pod as its related object and named in the note.
			g.o.Recorder.Eventf(nodeRef(g.o.Node), pod, corev1.EventTypeWarning, EventReason, string(call), "%s", decided.Message)
			return
		}
		g.o.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, EventReason, string(call), "%s", decided.Message)
	}
}

// nodeRef refers to a Node as the kubelet does in its own Events (UID set
// to the name), which kubectl describe node finds.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(name)}
}

// observeRunPodSandbox remembers whose sandbox the runtime created.
func (g *Guard) observeRunPodSandbox(req []byte) func([]byte, error) {
	r := &runtimeapi.RunPodSandboxRequest{}
	if proto.Unmarshal(req, r) != nil {
		return nil // the runtime will say what is wrong with it
	}
	e := sandboxEntry(r.GetConfig().GetLabels())
	if e.Pod.UID == "" {
		return nil
	}
	return func(resp []byte, err error) {
		out := &runtimeapi.RunPodSandboxResponse{}
		if err == nil && resp != nil && proto.Unmarshal(resp, out) == nil {
			g.index.put(out.GetPodSandboxId(), e)
		}
	}
}

// observeCreateContainer remembers whose container the runtime created and
// the image its pod spec named: the runtime may not report that again.
func (g *Guard) observeCreateContainer(req []byte) func([]byte, error) {
	r := &runtimeapi.CreateContainerRequest{}
	if proto.Unmarshal(req, r) != nil {
		return nil
	}
	cfg := r.GetConfig()
	e := entry{Pod: podRefOf(cfg.GetLabels()), SandboxID: r.GetPodSandboxId(),
		Container: containerName(cfg.GetLabels(), cfg.GetMetadata()), CreatedImage: cfg.GetImage().GetUserSpecifiedImage()}
	if e.Pod.UID == "" {
		return nil
	}
	return func(resp []byte, err error) {
		out := &runtimeapi.CreateContainerResponse{}
		if err == nil && resp != nil && proto.Unmarshal(resp, out) == nil {
			g.index.put(out.GetContainerId(), e)
			g.memory.created(e.Pod.UID, e.Container)
		}
	}
}
