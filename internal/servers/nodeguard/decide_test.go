package nodeguard

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

var now = time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)

// pod is a Running pod "shop/web" with a container "app" (image app:1),
// changed by each option.
func pod(opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u1",
			Labels: map[string]string{v1alpha1.LabelExplicitDeletion: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: now.Add(-time.Hour)},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "app:1", Started: ptr.To(true)}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func unlabelled(p *corev1.Pod) { p.Labels = nil }
func deleting(p *corev1.Pod)   { p.DeletionTimestamp = &metav1.Time{Time: now} }
func liveness(p *corev1.Pod)   { p.Spec.Containers[0].LivenessProbe = &corev1.Probe{} }
func startup(p *corev1.Pod)    { p.Spec.Containers[0].StartupProbe = &corev1.Probe{} }
func notStarted(p *corev1.Pod) { p.Status.ContainerStatuses[0].Started = ptr.To(false) }
func image2(p *corev1.Pod)     { p.Spec.Containers[0].Image = "app:2" }
func rejected(p *corev1.Pod) {
	p.Status.Phase, p.Status.Reason = corev1.PodFailed, "NodeAffinity"
}
func deadline(s int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To(s) }
}
func sidecar(p *corev1.Pod) {
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		LivenessProbe: &corev1.Probe{}}}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", Started: ptr.To(true)}}
}
func resized(policy corev1.ResourceResizeRestartPolicy) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: policy}}
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
		p.Status.ContainerStatuses[0].Resources = &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	}
}

// running is the view of a running container "app" of a protected pod in a
// ready sandbox, with the API reachable.
func running(p *corev1.Pod, opts ...func(*View)) View {
	v := View{Pod: PodRef{UID: "u1", Namespace: "shop", Name: "web"}, Container: "app", Running: true,
		SandboxReady: true, RegularRunning: true, CreatedImage: "app:1", APIReachable: true, APIPod: p,
		RuntimeEndpoint: "unix:///run/containerd/containerd.sock"}
	for _, o := range opts {
		o(&v)
	}
	return v
}

// lastSeen: the pod left the API; p is its last state the guard saw.
func lastSeen(p *corev1.Pod) func(*View) { return func(v *View) { v.LastSeen = p } }
func unreachable(v *View)                { v.APIReachable = false; v.APIProblem = "connection refused" }

func TestDecide(t *testing.T) {
	for _, tt := range []struct {
		name   string
		call   Call
		view   View
		allow  bool
		hold   bool
		reason string
		code   codes.Code
	}{
		// Not ours to judge.
		{"a sandbox no pod owns", StopPodSandbox, View{Running: true, SandboxReady: true}, true, false, ReasonNotAPod, 0},
		{"GC removes an exited container", RemoveContainer, running(pod(), func(v *View) { v.Running = false }), true, false, ReasonNothingRunning, 0},
		{"GC removes a dead sandbox", RemovePodSandbox, running(pod(), func(v *View) { v.Running = false; v.SandboxReady = false }), true, false, ReasonNothingRunning, 0},
		{"stop of an exited container", StopContainer, running(pod(), func(v *View) { v.Running = false }), true, false, ReasonNothingRunning, 0},
		{"sandbox not ready: the kubelet recreates it", StopContainer, running(pod(), func(v *View) { v.SandboxReady = false }), true, false, ReasonSandboxNotReady, 0},
		{"unlabelled pod", StopPodSandbox, running(pod(unlabelled)), true, false, ReasonNotProtected, 0},
		{"unlabelled pod, API unreachable", StopContainer, running(pod(unlabelled), func(v *View) { v.APIReachable = false }), true, false, ReasonNotProtected, 0},
		{"pod gone before the guard started, created unlabelled", StopPodSandbox, running(nil), true, false, ReasonNotInAPI, 0},
		{"pod vanished, unlabelled when last seen", StopPodSandbox, running(nil, lastSeen(pod(unlabelled))), true, false, ReasonNotProtected, 0},

		// The API asked.
		{"deletionTimestamp: sandbox", StopPodSandbox, running(pod(deleting)), true, false, ReasonDeletionAsked, 0},
		{"deletionTimestamp: container", StopContainer, running(pod(deleting)), true, false, ReasonDeletionAsked, 0},
		{"deletionTimestamp: remove running", RemoveContainer, running(pod(deleting)), true, false, ReasonDeletionAsked, 0},
		{"deletionTimestamp cached, API unreachable", StopPodSandbox, running(pod(deleting), func(v *View) { v.APIReachable = false }), true, false, ReasonDeletionAsked, 0},
		{"deleted through the API, then gone (forced or not)", StopPodSandbox, running(nil, lastSeen(pod(deleting))), true, false, ReasonDeletionAsked, 0},
		{"deleted through the API, then gone: container", StopContainer, running(nil, lastSeen(pod(deleting))), true, false, ReasonDeletionAsked, 0},
		{"deleted through the API, API unreachable since", StopPodSandbox, running(nil, lastSeen(pod(deleting)), unreachable), true, false, ReasonDeletionAsked, 0},

		// The pod's own spec or containers ended it.
		{"activeDeadlineSeconds passed", StopPodSandbox, running(pod(deadline(60), rejected)), true, false, ReasonActiveDeadline, 0},
		{"activeDeadlineSeconds not yet", StopPodSandbox, running(pod(deadline(7200))), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"only sidecars left: stop the sidecar", StopContainer, running(pod(sidecar), func(v *View) { v.Container = "proxy"; v.RegularRunning = false }), true, false, ReasonPodCompleted, 0},
		{"only sidecars left: stop the sandbox", StopPodSandbox, running(pod(sidecar), func(v *View) { v.RegularRunning = false }), true, false, ReasonPodCompleted, 0},

		// Kills nobody asked for.
		{"sandbox of a running protected pod", StopPodSandbox, running(pod()), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"remove sandbox with running containers", RemovePodSandbox, running(pod()), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"remove a running container", RemoveContainer, running(pod(liveness)), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"container without restart reason", StopContainer, running(pod()), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"rejected at admission (the incident)", StopContainer, running(pod(liveness, rejected)), false, false, ReasonKubeletEndedPod, codes.FailedPrecondition},
		{"rejected at admission: sandbox", StopPodSandbox, running(pod(rejected)), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"evicted", StopContainer, running(pod(liveness, func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" })), false, false, ReasonKubeletEndedPod, codes.FailedPrecondition},
		{"parallel stops of two containers", StopContainer, running(pod(liveness), func(v *View) { v.Concurrent = true }), false, false, reasonConcurrentStops, codes.FailedPrecondition},
		{"a kill of this pod seen moments ago", StopContainer, running(pod(image2), func(v *View) { v.KillSeen = true }), false, false, reasonKillSeenRecently, codes.FailedPrecondition},
		{"sandbox stop after a probe restart", StopPodSandbox, running(pod(liveness), func(v *View) { v.RestartPassed = true }), false, false, reasonRestartThenStop, codes.FailedPrecondition},
		{"sandbox stop after a probe restart, nothing runs", StopPodSandbox, running(pod(liveness), func(v *View) { v.RestartPassed = true; v.Running = false; v.RegularRunning = false }), false, false, reasonRestartThenStop, codes.FailedPrecondition},
		{"sandbox stop after a probe restart, restartPolicy Never", StopPodSandbox, running(pod(liveness, func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }), func(v *View) { v.RestartPassed = true; v.Running = false; v.RegularRunning = false }), true, false, ReasonPodCompleted, 0},
		{"API unreachable", StopContainer, running(pod(liveness), func(v *View) { v.APIReachable = false }), false, false, ReasonAPIUnreachable, codes.Unavailable},
		{"API unreachable, pod unseen, created protected", StopPodSandbox, running(nil, func(v *View) { v.APIReachable = false; v.RuntimeProtected = true }), false, false, ReasonAPIUnreachable, codes.Unavailable},
		{"API unreachable, pod unseen, created unprotected", StopPodSandbox, running(nil, func(v *View) { v.APIReachable = false }), true, false, ReasonNotProtected, 0},
		{"ephemeral container", StopContainer, running(pod(liveness), func(v *View) { v.Container = "debugger" }), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},

		// Vanished from the API without a trace of a delete: the orphan
		// cleanup after etcd lost or restored the pods.
		{"vanished: removed from the store", StopPodSandbox, running(nil, lastSeen(pod())), false, false, ReasonVanished, codes.FailedPrecondition},
		{"vanished: container", StopContainer, running(nil, lastSeen(pod(liveness))), false, false, ReasonVanished, codes.FailedPrecondition},
		{"vanished, API unreachable since", RemovePodSandbox, running(nil, lastSeen(pod()), unreachable), false, false, ReasonVanished, codes.FailedPrecondition},
		{"gone before the guard started, created protected", StopPodSandbox, running(nil, func(v *View) { v.RuntimeProtected = true }), false, false, ReasonVanished, codes.FailedPrecondition},

		// Restarts the spec asks for.
		{"image changed", StopContainer, running(pod(image2)), true, false, ReasonImageChanged, 0},
		{"image unknown: no evidence of a change", StopContainer, running(pod(image2), func(v *View) { v.CreatedImage = "" }), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"resize needing a restart", StopContainer, running(pod(resized(corev1.RestartContainer))), true, false, ReasonResizeRestart, 0},
		{"resize without restart", StopContainer, running(pod(resized(corev1.NotRequired))), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"liveness probe: held first", StopContainer, running(pod(liveness)), true, true, ReasonProbeRestart, 0},
		{"liveness probe: settled", StopContainer, running(pod(liveness), func(v *View) { v.Settled = true }), true, false, ReasonProbeRestart, 0},
		{"startup probe, not started", StopContainer, running(pod(startup, notStarted)), true, true, ReasonProbeRestart, 0},
		{"startup probe only, started: no probe can kill it", StopContainer, running(pod(startup)), false, false, ReasonNotAskedToEnd, codes.FailedPrecondition},
		{"liveness waits for startup", StopContainer, running(pod(liveness, startup, notStarted)), true, true, ReasonProbeRestart, 0},
		{"sidecar with a liveness probe", StopContainer, running(pod(sidecar), func(v *View) { v.Container = "proxy"; v.CreatedImage = "proxy:1" }), true, true, ReasonProbeRestart, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.call, tt.view, now)
			code := codes.OK // the call goes through
			if !v.Allowed {
				code = grpcCode(v.Refusal)
			}
			if v.Allowed != tt.allow || v.Hold != tt.hold || v.Reason != tt.reason || code != tt.code {
				t.Fatalf("Decide = allow %v hold %v reason %s code %s (%s), want allow %v hold %v reason %s code %s",
					v.Allowed, v.Hold, v.Reason, code, v.Message, tt.allow, tt.hold, tt.reason, tt.code)
			}
			if v.Allowed {
				return
			}
			if code == codes.NotFound || code == codes.OK {
				t.Fatalf("refusal with code %s: the kubelet takes NotFound as success", code)
			}
			wants := []string{string(tt.call), "shop/web", "kubectl delete pod -n shop web", "kubectl label pod -n shop web rampart.io/explicit-deletion-"}
			if v.Reason == ReasonVanished {
				// Nothing in the API to delete or unlabel.
				wants = []string{string(tt.call), "shop/web", "uid u1", "crictl --runtime-endpoint unix:///run/containerd/containerd.sock pods --label io.kubernetes.pod.uid=u1 -q | xargs -r crictl --runtime-endpoint unix:///run/containerd/containerd.sock stopp"}
			}
			for _, want := range wants {
				if !strings.Contains(v.Message, want) {
					t.Errorf("message lacks %q: %s", want, v.Message)
				}
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	views := []struct {
		name string
		call Call
		v    View
	}{
		{"refuse", StopContainer, running(pod())},
		{"probe-restart", StopContainer, running(pod(liveness), func(v *View) { v.Settled = true })},
		{"unprotected", StopPodSandbox, running(pod(unlabelled))},
	}
	for _, c := range views {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Decide(c.call, c.v, now)
			}
		})
	}
}
