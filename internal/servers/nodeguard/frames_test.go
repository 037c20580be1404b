package nodeguard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The forwarder's own HTTP/2 handling, on one kubelet connection: the
// answers it writes itself, the flow-control window of requests it holds
// and drops, and the compression state it shares with both ends.

// stopWithPadding is a StopContainer request for id carrying n bytes of a
// field StopContainerRequest does not have: the runtime and the guard
// ignore it, and it fills the connection's flow-control window.
func stopWithPadding(t *testing.T, id string, n int) []byte {
	b, err := proto.Marshal(&runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 30})
	if err != nil {
		t.Fatal(err)
	}
	return protowire.AppendBytes(protowire.AppendTag(b, 999, protowire.BytesType), make([]byte, n))
}

func TestRefusalsGiveBackTheWindowOfWhatTheyHeld(t *testing.T) {
	r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false))}})
	_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	ctx := bg(t)
	// 40 refusals of 20 KB each: 800 KB, twelve times the 64 KiB
	// connection window a client starts with. Were the window of the held
	// requests not given back, the kubelet's connection would stall.
	req := stopWithPadding(t, cs[0], 20<<10)
	for i := range 40 {
		_, _, _, err := rawCall(ctx, r.via, runtimeapi.RuntimeService_StopContainer_FullMethodName, req)
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("refusal %d: %v, want FailedPrecondition", i, err)
		}
	}
	if _, err := r.kubelet.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("the connection is stuck after the refusals: %v", err)
	}
	if calls := r.rt.calls(); len(calls) != 0 {
		t.Fatalf("the runtime received %v", calls)
	}
}

func TestRefusalsAndPassingCallsShareOneConnection(t *testing.T) {
	r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false))}})
	_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	ctx := bg(t)
	// Calls with metadata of their own fill both ends' HPACK tables while
	// the guard writes its answers into the same connection: any answer
	// that disturbed the kubelet's table would garble the headers of
	// every call after it.
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if (w+i)%3 == 0 {
					_, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30})
					if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "kubectl delete pod -n shop web") {
						errs <- fmt.Errorf("refusal: %v", err)
					}
					continue
				}
				mctx := metadata.AppendToOutgoingContext(ctx, "x-call", fmt.Sprintf("worker-%d-call-%d", w, i))
				v, err := r.kubelet.Version(mctx, &runtimeapi.VersionRequest{Version: fmt.Sprintf("v%d", i)})
				if err != nil || v.RuntimeName == "" {
					errs <- fmt.Errorf("Version: %v %v", v, err)
				}
				if _, err := r.kubelet.ListContainers(mctx, &runtimeapi.ListContainersRequest{}); err != nil {
					errs <- fmt.Errorf("ListContainers: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestACancelledHeldCallLeavesTheConnectionUsable(t *testing.T) {
	// A stop only a probe could explain is held for the settle window;
	// the kubelet gives up first.
	r := newRig(t, rigOptions{settle: time.Minute, pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", true))}})
	_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	ctx := bg(t)
	// Six held stops of 30 KB given up: 180 KB, more than the window a
	// connection starts with, dropped by the guard before the runtime.
	for range 6 {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, _, _, err := rawCall(short, r.via, runtimeapi.RuntimeService_StopContainer_FullMethodName, stopWithPadding(t, cs[0], 30<<10))
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("held stop with a 200 ms deadline = %v, want DeadlineExceeded", err)
		}
	}
	big, err := proto.Marshal(&runtimeapi.VersionRequest{Version: strings.Repeat("v", 30<<10)})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // more than the window the dropped request used
		if _, _, _, err := rawCall(ctx, r.via, runtimeapi.RuntimeService_Version_FullMethodName, big); err != nil {
			t.Fatalf("after a cancelled held call: %v", err)
		}
	}
	if r.received("StopContainer", cs[0]) {
		t.Fatal("the runtime received the cancelled stop")
	}
}

func TestRefusalFrameEncodesAsHPACKLiterals(t *testing.T) {
	long := strings.Repeat("é", 200) + "100% sure"
	f := refusalFrame(7, status.New(codes.FailedPrecondition, long))
	h := frameHeader{length: uint32(len(f) - frameHeaderLen), typ: 1, flags: 0x5, stream: 7}
	frag, err := headerFragment(h, f)
	if err != nil {
		t.Fatal(err)
	}
	hp := newHPACKReader()
	fields, err := hp.decode(frag)
	if err != nil {
		t.Fatal(err)
	}
	if err := statusOf(fields); status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != long {
		t.Fatalf("decoded %v", err)
	}
	for _, f := range fields {
		if !f.Sensitive {
			t.Errorf("%s was sent as a field a later hop may index; want never indexed", f.Name)
		}
	}
	// The first dynamic table entry (index 62) must still not exist.
	if _, err := hp.decode([]byte{0x80 | 62}); err == nil {
		t.Fatal("the answer added an entry to the receiver's HPACK table")
	}
}
