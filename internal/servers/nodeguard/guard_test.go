package nodeguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// rig is a fake runtime on a unix socket, the guard in front of it on
// another, an informer over a fake clientset, and a client of each socket
// standing in for the kubelet.
type rig struct {
	rt      *fakeRuntime
	health  *health.Server
	client  *fake.Clientset
	guard   *Guard
	direct  *grpc.ClientConn // the kubelet talking to the runtime
	via     *grpc.ClientConn // the kubelet talking to the guard
	kubelet runtimeapi.RuntimeServiceClient
	socket  string // the guard's
}

type rigOptions struct {
	pods []runtime.Object
	// unreachable: every LIST of pods fails, so the informer never syncs.
	unreachable bool
	settle      time.Duration
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "ng")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())

	r := &rig{rt: newFakeRuntime(), health: health.NewServer()}
	rtSock := filepath.Join(dir, "runtime.sock")
	rl, err := net.Listen("unix", rtSock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(deterministicCodec{}))
	runtimeapi.RegisterRuntimeServiceServer(srv, r.rt)
	runtimeapi.RegisterImageServiceServer(srv, r.rt)
	// A service the guard knows nothing of, with a streaming method.
	healthpb.RegisterHealthServer(srv, r.health)
	go func() { _ = srv.Serve(rl) }()

	r.client = fake.NewClientset(o.pods...)
	if o.unreachable {
		r.client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
		})
	}
	np := NewNodePods(r.client, "node-1", DefaultStaleAfter)
	go np.Run(ctx)
	if !o.unreachable {
		deadline := time.Now().Add(10 * time.Second)
		for !np.Synced() {
			if time.Now().After(deadline) {
				t.Fatal("the pod informer did not sync")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: r.client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	if o.settle == 0 {
		o.settle = 200 * time.Millisecond
	}
	r.guard, err = New(Options{Runtime: "unix://" + rtSock, Pods: np, Settle: o.settle, Node: "node-1",
		Recorder: broadcaster.NewRecorder(scheme.Scheme, "rampart-node-guard"),
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gSock := filepath.Join(dir, "guard.sock")
	gl, err := net.Listen("unix", gSock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = r.guard.Serve(ctx, gl); close(served) }()

	r.direct, r.via, r.socket = dial(t, rtSock), dial(t, gSock), gSock
	r.kubelet = runtimeapi.NewRuntimeServiceClient(r.via)
	t.Cleanup(func() {
		_ = r.direct.Close()
		_ = r.via.Close()
		cancel()
		<-served
		srv.Stop()
		broadcaster.Shutdown()
	})
	return r
}

func dial(t testing.TB, sock string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// apiPod is pod ns/name on node-1, Running, with containers named by cs.
func apiPod(uid, name string, protected bool, cs ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: cs},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range cs {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(true)})
	}
	if protected {
		p.Labels = map[string]string{v1alpha1.LabelExplicitDeletion: "true"}
	}
	return p
}

func ctr(name, image string, probe bool) corev1.Container {
	c := corev1.Container{Name: name, Image: image}
	if probe {
		c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}}
	}
	return c
}

func bg(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// refused checks that err is the guard's refusal with code.
func refused(t *testing.T, err error, code codes.Code) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != code || !strings.Contains(s.Message(), "rampart node-guard refused") {
		t.Fatalf("got %v, want the guard's refusal with code %s", err, code)
	}
}

// received says whether the runtime got call for id.
func (r *rig) received(call, id string) bool {
	for _, c := range r.rt.calls() {
		if c == call+" "+id {
			return true
		}
	}
	return false
}

// waitEvent waits for the KillVetoed Event of call on pod shop/name.
func (r *rig) waitEvent(t *testing.T, name string, call Call) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l, err := r.client.EventsV1().Events("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			if e.Regarding.Name == name && e.Reason == EventReason && e.Action == string(call) && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, "kubectl delete pod -n shop "+name) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s Event for %s of pod shop/%s", EventReason, call, name)
}

// waitNodeEvent waits for a KillVetoed Event on Node node-1 (where
// kubectl describe node finds it) about the pod ns/name with uid.
func (r *rig) waitNodeEvent(t *testing.T, pod string, uid types.UID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l, err := r.client.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == "node-1" && e.Reason == EventReason && e.Type == corev1.EventTypeWarning &&
				e.Related != nil && e.Related.Kind == "Pod" && e.Related.Namespace+"/"+e.Related.Name == pod && e.Related.UID == uid &&
				strings.Contains(e.Note, pod) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s Event on Node node-1 about pod %s", EventReason, pod)
}

// updatePod changes the API's pod and waits until the guard's informer has
// the change.
func (r *rig) updatePod(t *testing.T, name string, change func(*corev1.Pod), seen func(*corev1.Pod) bool) {
	t.Helper()
	p, err := r.client.CoreV1().Pods("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(p)
	if _, err := r.client.CoreV1().Pods("shop").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if q := r.guard.o.Pods.Pod(p.UID); q != nil && seen(q) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer did not see the change")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawCall sends req as it is and returns the answer's bytes, headers and
// trailers.
func rawCall(ctx context.Context, conn *grpc.ClientConn, method string, req []byte) ([]byte, metadata.MD, metadata.MD, error) {
	in := &frame{data: mem.BufferSlice{mem.SliceBuffer(req)}}
	out := &frame{}
	var header, trailer metadata.MD
	err := conn.Invoke(ctx, method, in, out, grpc.ForceCodecV2(rawCodec{}), grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		return nil, header, trailer, err
	}
	return out.bytes(), header, trailer, nil
}

func TestPassThroughIsByteIdentical(t *testing.T) {
	r := newRig(t, rigOptions{})
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	ctx := bg(t)
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		method string
		req    []byte
	}{
		{runtimeapi.RuntimeService_Version_FullMethodName, marshal(&runtimeapi.VersionRequest{Version: "v1"})},
		{runtimeapi.RuntimeService_PodSandboxStatus_FullMethodName, marshal(&runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb, Verbose: true})},
		{runtimeapi.RuntimeService_ListPodSandbox_FullMethodName, marshal(&runtimeapi.ListPodSandboxRequest{})},
		{runtimeapi.RuntimeService_ListContainers_FullMethodName, marshal(&runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sb}})},
		{runtimeapi.RuntimeService_ContainerStatus_FullMethodName, marshal(&runtimeapi.ContainerStatusRequest{ContainerId: cs[0]})},
		{runtimeapi.ImageService_ListImages_FullMethodName, marshal(&runtimeapi.ListImagesRequest{})},
		// An error answer: code and message as the runtime said them.
		{runtimeapi.RuntimeService_ContainerStatus_FullMethodName, marshal(&runtimeapi.ContainerStatusRequest{ContainerId: "nope"})},
		// A method the fake does not implement: Unimplemented from the runtime, not from the guard.
		{runtimeapi.RuntimeService_CheckpointContainer_FullMethodName, marshal(&runtimeapi.CheckpointContainerRequest{ContainerId: cs[0]})},
	} {
		t.Run(c.method[strings.LastIndex(c.method, "/")+1:], func(t *testing.T) {
			want, wantH, wantT, wantErr := rawCall(ctx, r.direct, c.method, c.req)
			got, gotH, gotT, gotErr := rawCall(ctx, r.via, c.method, c.req)
			if wantErr == nil && len(want) == 0 && c.method != runtimeapi.RuntimeService_CheckpointContainer_FullMethodName {
				t.Fatal("the runtime answered nothing: nothing to compare")
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("answer through the guard differs:\n got %x\nwant %x", got, want)
			}
			if status.Code(gotErr) != status.Code(wantErr) || status.Convert(gotErr).Message() != status.Convert(wantErr).Message() {
				t.Fatalf("error through the guard %v, direct %v", gotErr, wantErr)
			}
			for _, k := range []string{"x-runtime", "x-runtime-trailer"} {
				if strings.Join(wantH.Get(k), ",")+strings.Join(wantT.Get(k), ",") != strings.Join(gotH.Get(k), ",")+strings.Join(gotT.Get(k), ",") {
					t.Fatalf("metadata %s: through the guard %v %v, direct %v %v", k, gotH, gotT, wantH, wantT)
				}
			}
		})
	}
}

func TestStreamingAndUnknownServicesPass(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx := bg(t)

	// A CRI server-streaming method.
	s, err := r.kubelet.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		_, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("got %d container events through the guard, want 3", n)
	}

	// grpc.health.v1.Health: a service the guard was never told of.
	r.health.SetServingStatus("runtime", healthpb.HealthCheckResponse_SERVING)
	hc := healthpb.NewHealthClient(r.via)
	if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "runtime"}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check through the guard = %v, %v", resp, err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "runtime"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch message = %v, %v", m, err)
	}
	r.health.SetServingStatus("runtime", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second Watch message = %v, %v", m, err)
	}
}

func TestProtectedPodKillsAreRefused(t *testing.T) {
	r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false), ctr("log", "log:1", false))}})
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"}, fakeContainer{"log", "log:1"})
	ctx := bg(t)

	_, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30})
	refused(t, err, codes.FailedPrecondition)
	_, err = r.kubelet.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cs[1]})
	refused(t, err, codes.FailedPrecondition)
	_, err = r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb})
	refused(t, err, codes.FailedPrecondition)
	_, err = r.kubelet.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb})
	refused(t, err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	for _, want := range []string{"RemovePodSandbox", "shop/web", "kubectl delete pod -n shop web", "kubectl label pod -n shop web rampart.io/explicit-deletion-"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q: %s", want, msg)
		}
	}
	if calls := r.rt.calls(); len(calls) != 0 {
		t.Fatalf("the runtime received %v", calls)
	}
	for _, call := range []Call{StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox} {
		r.waitEvent(t, "web", call)
	}
	if n := testutil.ToFloat64(r.guard.o.Metrics.vetoes.WithLabelValues(string(StopPodSandbox), ReasonNotAskedToEnd)); n != 1 {
		t.Fatalf("rampart_nodeguard_vetoes_total{call=StopPodSandbox} = %v, want 1", n)
	}
	// The containers still run.
	l, _ := runtimeapi.NewRuntimeServiceClient(r.direct).ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	for _, c := range l.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container %s is %s", c.Id, c.State)
		}
	}
}

func TestDeletedPodEnds(t *testing.T) {
	p := apiPod("u1", "web", true, ctr("app", "app:1", true))
	r := newRig(t, rigOptions{pods: []runtime.Object{p}})
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	ctx := bg(t)
	// What kubectl delete pod does first: the API sets deletionTimestamp.
	r.updatePod(t, "web", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} },
		func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })

	start := time.Now()
	// The kubelet's killPod: containers, then the sandbox; later GC removes them.
	if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kubelet.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cs[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kubelet.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a deleted pod took %s to end: it must not wait for the settle window", d)
	}
	for _, want := range []string{"StopContainer " + cs[0], "StopPodSandbox " + sb, "RemoveContainer " + cs[0], "RemovePodSandbox " + sb} {
		if !r.received(strings.Fields(want)[0], strings.Fields(want)[1]) {
			t.Fatalf("the runtime did not receive %s: %v", want, r.rt.calls())
		}
	}
	if _, ok := r.guard.index.get(sb); ok {
		t.Fatal("the removed sandbox is still in the index")
	}
}

// stalePods is a cache that has not seen the pod's latest update.
type stalePods struct {
	*NodePods
	stale *corev1.Pod
}

func (s stalePods) Pod(types.UID) *corev1.Pod { return s.stale }

// The kubelet may act on a deletionTimestamp before the guard's cache has
// it: the guard reads the pod from the API before it refuses, and lets the
// kill the API asked for through at once (kubectl delete pod stays quick);
// a pod the API has not asked to end is still refused.
func TestAKillTheCacheHasNotCaughtUpWithIsReadAgain(t *testing.T) {
	p := apiPod("u1", "web", true, ctr("app", "app:1", false), ctr("log", "log:1", false))
	r := newRig(t, rigOptions{pods: []runtime.Object{p}})
	_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"}, fakeContainer{"log", "log:1"})
	r.guard.o.Pods = stalePods{NodePods: r.guard.o.Pods.(*NodePods), stale: p.DeepCopy()}
	ctx := bg(t)
	_, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30})
	refused(t, err, codes.FailedPrecondition)

	live := p.DeepCopy()
	live.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := r.client.CoreV1().Pods(p.Namespace).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30}); err != nil {
		t.Fatalf("a kill the API asked for, not yet in the guard's cache: %v, want it through", err)
	}
	if !r.received("StopContainer", cs[0]) {
		t.Fatalf("the runtime did not receive the stop: %v", r.rt.calls())
	}
}

// TestVanishedPods: a protected pod deleted through the API, even with
// --grace-period=0 --force, leaves the API with a deletionTimestamp in its
// last state (the API server writes it, then deletes: see
// TestPodDeletesLeaveADeletionTimestamp in internal/protection/admission, against the
// real one) and ends; one removed from the store directly has none and
// keeps running, and the refusal names the way out.
func TestVanishedPods(t *testing.T) {
	forced := apiPod("u1", "web", true, ctr("app", "app:1", false))
	lost := apiPod("u2", "db", true, ctr("db", "db:1", false))
	r := newRig(t, rigOptions{pods: []runtime.Object{forced, lost}})
	fsb, fcs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	lsb, lcs := r.rt.addPod("u2", "shop", "db", true, fakeContainer{"db", "db:1"})
	// The fake clientset deletes without the API server's update first.
	r.updatePod(t, "web", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} },
		func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	ctx := bg(t)
	for _, name := range []string{"web", "db"} {
		if err := r.client.CoreV1().Pods("shop").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.guard.o.Pods.Vanished("u1") == nil || r.guard.o.Pods.Vanished("u2") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the informer did not see the pods go")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The kubelet's kill of a pod gone from the API: containers, sandbox.
	if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: fcs[0], Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: fsb}); err != nil {
		t.Fatal(err)
	}
	_, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: lcs[0], Timeout: 1})
	refused(t, err, codes.FailedPrecondition)
	_, err = r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: lsb})
	refused(t, err, codes.FailedPrecondition)
	msg := status.Convert(err).Message()
	for _, want := range []string{"StopPodSandbox", "shop/db", "vanished from the API", "crictl --runtime-endpoint unix://", "io.kubernetes.pod.uid=u2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q: %s", want, msg)
		}
	}
	if !r.received("StopContainer", fcs[0]) || !r.received("StopPodSandbox", fsb) || r.received("StopContainer", lcs[0]) || r.received("StopPodSandbox", lsb) {
		t.Fatalf("runtime received %v", r.rt.calls())
	}
	if n := testutil.ToFloat64(r.guard.o.Metrics.vetoes.WithLabelValues(string(StopPodSandbox), ReasonVanished)); n != 1 {
		t.Fatalf("rampart_nodeguard_vetoes_total{call=StopPodSandbox,reason=VanishedFromAPI} = %v, want 1", n)
	}
	// The pod is gone, so the Event is on the Node, naming it.
	r.waitNodeEvent(t, "shop/db", "u2")
	// Restored with its UID (an etcd restore): the API's pod rules again.
	if _, err := r.client.CoreV1().Pods("shop").Create(ctx, apiPod("u2", "db", true, ctr("db", "db:1", false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for r.guard.o.Pods.Vanished("u2") != nil || r.guard.o.Pods.Pod("u2") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the informer did not see the pod come back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err = r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: lsb})
	refused(t, err, codes.FailedPrecondition)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "kubectl delete pod -n shop db") {
		t.Errorf("the refusal for a restored pod does not name kubectl delete: %s", msg)
	}

	// Pods the guard never saw in the API: one created with the label
	// (gone while the guard was away) is kept; a static pod, whose API
	// mirror has another UID, is the kubelet's own and passes.
	unseen, _ := r.rt.addPod("u3", "shop", "unseen", true, fakeContainer{"app", "app:1"})
	static, _ := r.rt.addPod("u4", "kube-system", "etcd-node-1", true, fakeContainer{"etcd", "etcd:1"})
	r.rt.mu.Lock()
	r.rt.sandboxes[static].Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	r.rt.mu.Unlock()
	_, err = r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: unseen})
	refused(t, err, codes.FailedPrecondition)
	if _, err := r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: static}); err != nil {
		t.Fatalf("StopPodSandbox of a static pod: %v", err)
	}
}

func TestUnlabelledPodsPass(t *testing.T) {
	r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u2", "batch", false, ctr("job", "job:1", false))}})
	sb, cs := r.rt.addPod("u2", "shop", "batch", false, fakeContainer{"job", "job:1"})
	ctx := bg(t)
	if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb}); err != nil {
		t.Fatal(err)
	}
	// And IDs that are no pod's, or no one's.
	if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "not-there"}); status.Code(err) != codes.NotFound {
		t.Fatalf("StopContainer of an unknown ID = %v, want the runtime's NotFound", err)
	}
	if !r.received("StopContainer", cs[0]) || !r.received("StopPodSandbox", sb) || !r.received("StopContainer", "not-there") {
		t.Fatalf("runtime received %v", r.rt.calls())
	}
}

func TestSpecDrivenRestartsPass(t *testing.T) {
	t.Run("liveness probe: one container stopped, held for the settle window", func(t *testing.T) {
		r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", true))}})
		_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
		start := time.Now()
		if _, err := r.kubelet.StopContainer(bg(t), &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("a probe restart passed in %s, before the settle window", d)
		}
		if !r.received("StopContainer", cs[0]) {
			t.Fatal("the runtime did not receive the restart's StopContainer")
		}
	})
	t.Run("image changed in the spec: passes at once", func(t *testing.T) {
		r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false))}})
		// The kubelet creates the container through the guard; this runtime
		// (like containerd 1.6) does not report user_specified_image back.
		sb, _ := r.rt.addPod("u1", "shop", "web", true)
		ctx := bg(t)
		created, err := r.kubelet.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: "sha256:app1", UserSpecifiedImage: "app:1"},
			Labels:   map[string]string{labelPodUID: "u1", labelPodNamespace: "shop", labelPodName: "web", labelContainerName: "app"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.kubelet.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
			t.Fatal(err)
		}
		// Without a change, the stop has no restart reason.
		_, err = r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: created.ContainerId})
		refused(t, err, codes.FailedPrecondition)
		r.guard.memory = newMemory(DefaultMemory) // forget that refusal: this case is about the image
		r.updatePod(t, "web", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:2" },
			func(p *corev1.Pod) bool { return p.Spec.Containers[0].Image == "app:2" })
		start := time.Now()
		if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: created.ContainerId}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 150*time.Millisecond {
			t.Fatalf("an image restart took %s: it needs no settle window", d)
		}
	})
	t.Run("GC removes an exited container", func(t *testing.T) {
		r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", false))}})
		_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"}, fakeContainer{"old", "app:0"})
		r.rt.setState(cs[1], runtimeapi.ContainerState_CONTAINER_EXITED)
		if _, err := r.kubelet.RemoveContainer(bg(t), &runtimeapi.RemoveContainerRequest{ContainerId: cs[1]}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPodKillsThatLookLikeRestartsAreRefused(t *testing.T) {
	t.Run("two containers stopped at once", func(t *testing.T) {
		r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", true), ctr("log", "log:1", true))}})
		_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"}, fakeContainer{"log", "log:1"})
		// The kubelet's killContainersWithSyncResult: one goroutine per container.
		var wg sync.WaitGroup
		errs := make([]error, len(cs))
		for i, id := range cs {
			wg.Go(func() {
				_, errs[i] = r.kubelet.StopContainer(bg(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 30})
			})
		}
		wg.Wait()
		for _, err := range errs {
			refused(t, err, codes.FailedPrecondition)
		}
		if calls := r.rt.calls(); len(calls) != 0 {
			t.Fatalf("the runtime received %v", calls)
		}
	})
	t.Run("the kubelet marks the pod Failed while the stop is held", func(t *testing.T) {
		r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", true))}, settle: time.Second})
		_, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
		done := make(chan error, 1)
		go func() {
			_, err := r.kubelet.StopContainer(bg(t), &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30})
			done <- err
		}()
		for held := false; !held; time.Sleep(time.Millisecond) {
			r.guard.memory.mu.Lock()
			held = r.guard.memory.pods["u1"] != nil && len(r.guard.memory.pods["u1"].stopping) == 1
			r.guard.memory.mu.Unlock()
		}
		// The incident: the kubelet rejects the pod at re-admission
		// (NodeAffinity), writes phase Failed, and kills it.
		r.updatePod(t, "web", func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "NodeAffinity"
		}, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		refused(t, <-done, codes.FailedPrecondition)
		if r.received("StopContainer", cs[0]) {
			t.Fatal("the runtime received the StopContainer")
		}
	})
	t.Run("sandbox stopped after a stop taken for a restart", func(t *testing.T) {
		r := newRig(t, rigOptions{pods: []runtime.Object{apiPod("u1", "web", true, ctr("app", "app:1", true))}})
		sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
		ctx := bg(t)
		// An orphan kill of a one-container pod looks like a liveness
		// restart until the sandbox stop comes.
		if _, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0], Timeout: 30}); err != nil {
			t.Fatal(err)
		}
		_, err := r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb})
		refused(t, err, codes.FailedPrecondition)
		r.waitEvent(t, "web", StopPodSandbox)
	})
}

func TestAPIUnreachableRefusesProtectedPods(t *testing.T) {
	r := newRig(t, rigOptions{unreachable: true})
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	other, _ := r.rt.addPod("u2", "shop", "batch", false, fakeContainer{"job", "job:1"})
	ctx := bg(t)
	_, err := r.kubelet.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cs[0]})
	refused(t, err, codes.Unavailable)
	_, err = r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb})
	refused(t, err, codes.Unavailable)
	if !strings.Contains(status.Convert(err).Message(), "cannot reach the API server") {
		t.Fatalf("refusal does not say the API is unreachable: %v", err)
	}
	// A pod created without the label passes: the guard must not stop
	// the node's ordinary work when the API is away.
	if _, err := r.kubelet.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: other}); err != nil {
		t.Fatal(err)
	}
	if r.received("StopContainer", cs[0]) || r.received("StopPodSandbox", sb) || !r.received("StopPodSandbox", other) {
		t.Fatalf("runtime received %v", r.rt.calls())
	}
}

func TestMalformedRequestsDoNotCrashTheGuard(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx := bg(t)
	junk := []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	for _, m := range []string{
		runtimeapi.RuntimeService_StopContainer_FullMethodName,
		runtimeapi.RuntimeService_StopPodSandbox_FullMethodName,
		runtimeapi.RuntimeService_RemoveContainer_FullMethodName,
		runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName,
	} {
		_, _, _, err := rawCall(ctx, r.via, m, junk)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s with junk = %v, want InvalidArgument", m, err)
		}
	}
	// Calls the guard only watches, and calls it does not know, go to the
	// runtime as they are; the runtime answers.
	for _, m := range []string{runtimeapi.RuntimeService_RunPodSandbox_FullMethodName, runtimeapi.RuntimeService_CreateContainer_FullMethodName, "/no.Such/Method"} {
		_, _, _, err := rawCall(ctx, r.via, m, junk)
		if err == nil || strings.Contains(status.Convert(err).Message(), "node-guard") {
			t.Fatalf("%s with junk = %v, want the runtime's error", m, err)
		}
	}
	// A stream opened on StopContainer and closed without a request.
	s, err := r.via.NewStream(ctx, bidi, runtimeapi.RuntimeService_StopContainer_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	if err := s.RecvMsg(&frame{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("StopContainer without a request = %v, want InvalidArgument", err)
	}
	if len(r.rt.calls()) != 0 {
		t.Fatalf("the runtime received %v", r.rt.calls())
	}
	if _, err := r.kubelet.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("the guard stopped serving: %v", err)
	}
}

func TestIndexIsRebuiltAtStart(t *testing.T) {
	r := newRig(t, rigOptions{})
	// The rig started the guard with an empty runtime; fill it, then build.
	sb, cs := r.rt.addPod("u1", "shop", "web", true, fakeContainer{"app", "app:1"})
	r.rt.addPod("", "", "not-a-pod", false, fakeContainer{"x", "x:1"})
	if err := r.guard.index.rebuild(bg(t), runtimeapi.NewRuntimeServiceClient(r.direct)); err != nil {
		t.Fatal(err)
	}
	if e, ok := r.guard.index.get(sb); !ok || e.Pod.UID != "u1" || !e.Protected {
		t.Fatalf("sandbox entry = %+v, %v", e, ok)
	}
	if e, ok := r.guard.index.get(cs[0]); !ok || e.Container != "app" || e.SandboxID != sb || e.CreatedImage != "app:1" {
		t.Fatalf("container entry = %+v, %v", e, ok)
	}
	if n := r.guard.index.len(); n != 2 {
		t.Fatalf("index has %d entries, want 2 (a sandbox without pod labels is no pod's)", n)
	}
}

func TestNodePodsReachability(t *testing.T) {
	n := NewNodePods(fake.NewClientset(), "node-1", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)
	for !n.Synced() {
		time.Sleep(time.Millisecond)
	}
	now := time.Now()
	if ok, why := n.Reachable(now); !ok {
		t.Fatalf("synced and no error: unreachable (%s)", why)
	}
	n.record(errors.New("watch: connection refused"))
	if ok, _ := n.Reachable(now.Add(30 * time.Second)); !ok {
		t.Fatal("a failure younger than staleAfter made the API unreachable")
	}
	if ok, why := n.Reachable(now.Add(2 * time.Minute)); ok || !strings.Contains(why, "connection refused") {
		t.Fatalf("failing for 2m: reachable %v (%s)", ok, why)
	}
	n.record(nil)
	if ok, _ := n.Reachable(now.Add(3 * time.Minute)); !ok {
		t.Fatal("a success did not make the API reachable again")
	}
}

// racingPods is the moment after the watch said a pod was deleted and
// before the informer's store dropped it: both still answer.
type racingPods struct{ pod, last *corev1.Pod }

func (p racingPods) Pod(types.UID) *corev1.Pod          { return p.pod }
func (p racingPods) Vanished(types.UID) *corev1.Pod     { return p.last }
func (p racingPods) Reachable(time.Time) (bool, string) { return true, "" }

// TestVanishedWinsOverTheStore: the kubelet, watching the same API
// server, asks to kill a pod removed from etcd within milliseconds, when
// the guard's store may still hold it (the orphaned-pods drill saw it):
// the guard judges it by the DELETE its watch already reported, so the
// refusal says the pod vanished instead of "kubectl delete pod".
func TestVanishedWinsOverTheStore(t *testing.T) {
	pod := apiPod("u1", "db", true, ctr("db", "db:1", false))
	last := pod.DeepCopy()
	g := &Guard{o: Options{Pods: racingPods{pod: pod, last: last}}, memory: newMemory(time.Minute)}
	v := View{Pod: PodRef{Namespace: "shop", Name: "db", UID: "u1"}, Running: true, SandboxReady: true}
	g.fillAPI(&v, nil, nil, time.Now())
	if v.APIPod != nil || v.LastSeen != last {
		t.Fatalf("APIPod %v, LastSeen %v: want the pod judged as gone", v.APIPod != nil, v.LastSeen != nil)
	}
	if d := Decide(StopPodSandbox, v, time.Now()); d.Allowed || d.Reason != ReasonVanished {
		t.Fatalf("Decide = %+v, want a %s refusal", d, ReasonVanished)
	}
}
