package nodeguard

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
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
		r.stillRuns(t, sb, cs[0], req)
	})
}

// FuzzKubeletConnection opens a connection to the guard, sends the HTTP/2
// preface, then arbitrary bytes: frames of any type, length and flags,
// header blocks of any content. Whatever they are, the guard ends that
// connection or passes it on, keeps serving the kubelet's other
// connection, and the protected pod keeps running.
func FuzzKubeletConnection(f *testing.F) {
	r := newRig(f, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false))}})
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	stop, _ := proto.Marshal(&runtimeapi.StopContainerRequest{ContainerId: cs[0]})
	msg := append([]byte{0, 0, 0, 0, byte(len(stop))}, stop...)
	block := hpackNeverIndexed(":method", "POST", ":scheme", "http", ":path", runtimeapi.RuntimeService_StopContainer_FullMethodName, ":authority", "x", "content-type", "application/grpc")
	settings := frameBytes(http2.FrameSettings, 0, 0, nil)
	f.Add(append(append(settings, frameBytes(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 1, block)...), frameBytes(http2.FrameData, http2.FlagDataEndStream, 1, msg)...))
	f.Add(append(settings, frameBytes(http2.FrameHeaders, 0, 1, block[:7])...))                         // a block cut short, no CONTINUATION
	f.Add(append(settings, frameBytes(http2.FrameData, http2.FlagDataPadded, 1, []byte{200, 1, 2})...)) // padding past the end
	f.Add(append(settings, frameBytes(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersPriority, 3, []byte{1})...))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := net.Dial("unix", r.socket)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write(append([]byte(http2.ClientPreface), in...))
		_ = c.(*net.UnixConn).CloseWrite()                   // the kubelet's side ends: the guard ends the connection
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20)) // until it does, or the deadline
		_ = c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := r.kubelet.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatalf("the guard stopped serving: %v", err)
		}
		r.stillRuns(t, sb, cs[0], in)
	})
}

// stillRuns fails the test if the sandbox or the container was stopped or
// removed, naming the input that did it.
func (r *rig) stillRuns(t *testing.T, sandbox, container string, by []byte) {
	t.Helper()
	r.rt.mu.Lock()
	defer r.rt.mu.Unlock()
	if s := r.rt.sandboxes[sandbox]; s == nil || s.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("the protected pod's sandbox was stopped or removed by %x", by)
	}
	if c := r.rt.containers[container]; c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("the protected pod's container was stopped or removed by %x", by)
	}
}
