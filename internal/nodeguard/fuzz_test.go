package nodeguard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzPodEndingRequests sends arbitrary bytes as the request of each
// pod-ending call (and of the calls the guard watches) through the guard
// in front of a runtime holding one running protected pod that nobody
// deleted. Whatever the bytes, the guard keeps serving and the pod keeps
// running: no ID spelling (a prefix, extra fields, junk) gets a kill of it
// past the guard.
func FuzzPodEndingRequests(f *testing.F) {
	r := newRig(f, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false))}})
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	methods := []string{
		runtimeapi.RuntimeService_StopContainer_FullMethodName,
		runtimeapi.RuntimeService_RemoveContainer_FullMethodName,
		runtimeapi.RuntimeService_StopPodSandbox_FullMethodName,
		runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName,
		runtimeapi.RuntimeService_CreateContainer_FullMethodName,
		runtimeapi.RuntimeService_RunPodSandbox_FullMethodName,
	}
	seed := func(m int, msg proto.Message) {
		b, _ := proto.Marshal(msg)
		f.Add(uint8(m), b)
	}
	seed(0, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30})
	seed(0, &runtimeapi.StopContainerRequest{ContainerId: cs[0][:12]})
	seed(1, &runtimeapi.RemoveContainerRequest{ContainerId: cs[0]})
	seed(2, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb})
	seed(3, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb})
	seed(4, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: &runtimeapi.ContainerConfig{
		Labels: map[string]string{labelPodUID: "u1", labelContainerName: "app"}}})
	f.Add(uint8(2), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, m uint8, req []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _, _ = rawCall(ctx, r.via, methods[int(m)%len(methods)], req)
		if _, err := r.kubelet.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatalf("the guard stopped serving: %v", err)
		}
		r.rt.mu.Lock()
		defer r.rt.mu.Unlock()
		if s := r.rt.sandboxes[sb]; s == nil || s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatalf("the protected pod's sandbox was stopped or removed by %x", req)
		}
		if c := r.rt.containers[cs[0]]; c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("the protected pod's container was stopped or removed by %x", req)
		}
	})
}
