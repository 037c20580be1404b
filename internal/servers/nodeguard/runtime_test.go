package nodeguard

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// fakeRuntime is a CRI runtime in memory: enough of RuntimeService and
// ImageService for the kubelet's pod-ending calls and the guard's
// questions, recording the calls that change state. The rest is the
// Unimplemented servers'.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	mu         sync.Mutex
	sandboxes  map[string]*runtimeapi.PodSandboxStatus
	containers map[string]*runtimeapi.Container
	received   []string
	// stopKeepsRunning makes StopContainer leave the container running
	// (for benchmarks that stop the same container again and again).
	stopKeepsRunning bool
	next             int
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{sandboxes: map[string]*runtimeapi.PodSandboxStatus{}, containers: map[string]*runtimeapi.Container{}}
}

type fakeContainer struct{ name, image string }

// addPod adds a ready sandbox of pod uid ns/name, labelled as the kubelet
// labels it (with the pod's labels, here the protection label when
// protected), and a running container for each of cs. It returns the
// sandbox's ID and the containers' IDs.
func (r *fakeRuntime) addPod(uid, ns, name string, protected bool, cs ...fakeContainer) (string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	labels := map[string]string{labelPodUID: uid, labelPodNamespace: ns, labelPodName: name}
	if protected {
		labels[v1alpha1.LabelExplicitDeletion] = "true"
	}
	sb := fmt.Sprintf("sandbox-%s-%040d", name, r.id())
	r.sandboxes[sb] = &runtimeapi.PodSandboxStatus{Id: sb, State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: labels,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid}}
	var ids []string
	for _, c := range cs {
		id := fmt.Sprintf("container-%s-%s-%040d", name, c.name, r.id())
		r.containers[id] = &runtimeapi.Container{Id: id, PodSandboxId: sb, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: c.name},
			Image:    &runtimeapi.ImageSpec{Image: "sha256:" + c.image, UserSpecifiedImage: c.image},
			Labels:   map[string]string{labelPodUID: uid, labelPodNamespace: ns, labelPodName: name, labelContainerName: c.name}}
		ids = append(ids, id)
	}
	return sb, ids
}

func (r *fakeRuntime) id() int { r.next++; return r.next }

func (r *fakeRuntime) setState(id string, s runtimeapi.ContainerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.containers[id].State = s
}

// calls are the state-changing calls the runtime received, "Method ID".
func (r *fakeRuntime) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.received...)
}

func (r *fakeRuntime) got(method, id string) {
	r.received = append(r.received, method+" "+id)
}

func (r *fakeRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	// Headers and trailers must reach the kubelet too.
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-runtime", "fake"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-runtime-trailer", "done"))
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.0.0", RuntimeApiVersion: "v1"}, nil
}

func (r *fakeRuntime) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	md := req.GetConfig().GetMetadata()
	id := fmt.Sprintf("sandbox-%s-%040d", md.GetName(), r.id())
	r.sandboxes[id] = &runtimeapi.PodSandboxStatus{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Labels: req.GetConfig().GetLabels(), Metadata: md}
	r.got("RunPodSandbox", id)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (r *fakeRuntime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got("StopPodSandbox", req.GetPodSandboxId())
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q not found", req.GetPodSandboxId())
	}
	sb.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	for _, c := range r.containers {
		if c.PodSandboxId == sb.Id {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		}
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *fakeRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got("RemovePodSandbox", req.GetPodSandboxId())
	delete(r.sandboxes, req.GetPodSandboxId())
	for id, c := range r.containers {
		if c.PodSandboxId == req.GetPodSandboxId() {
			delete(r.containers, id)
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (r *fakeRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find sandbox %q: not found", req.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: proto.Clone(sb).(*runtimeapi.PodSandboxStatus), Info: map[string]string{"b": "2", "a": "1"}}, nil
}

func (r *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range r.sandboxes {
		out.Items = append(out.Items, &runtimeapi.PodSandbox{Id: sb.Id, Metadata: sb.Metadata, State: sb.State, Labels: sb.Labels})
	}
	sort.Slice(out.Items, func(i, j int) bool { return out.Items[i].Id < out.Items[j].Id })
	return out, nil
}

func (r *fakeRuntime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := req.GetConfig()
	id := fmt.Sprintf("container-%s-%040d", cfg.GetMetadata().GetName(), r.id())
	// Like containerd 1.6, this runtime does not keep user_specified_image:
	// only the create request tells the guard the spec's image.
	r.containers[id] = &runtimeapi.Container{Id: id, PodSandboxId: req.GetPodSandboxId(), State: runtimeapi.ContainerState_CONTAINER_CREATED,
		Metadata: cfg.GetMetadata(), Image: &runtimeapi.ImageSpec{Image: cfg.GetImage().GetImage()}, Labels: cfg.GetLabels()}
	r.got("CreateContainer", id)
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (r *fakeRuntime) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	c.State = runtimeapi.ContainerState_CONTAINER_RUNNING
	return &runtimeapi.StartContainerResponse{}, nil
}

func (r *fakeRuntime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got("StopContainer", req.GetContainerId())
	c, ok := r.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	if !r.stopKeepsRunning {
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *fakeRuntime) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got("RemoveContainer", req.GetContainerId())
	delete(r.containers, req.GetContainerId())
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *fakeRuntime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := req.GetFilter()
	out := &runtimeapi.ListContainersResponse{}
	for id, c := range r.containers {
		// Like containerd, an ID filter may be a unique prefix.
		if (f.GetId() != "" && !strings.HasPrefix(id, f.GetId())) || (f.GetPodSandboxId() != "" && c.PodSandboxId != f.GetPodSandboxId()) {
			continue
		}
		out.Containers = append(out.Containers, proto.Clone(c).(*runtimeapi.Container))
	}
	sort.Slice(out.Containers, func(i, j int) bool { return out.Containers[i].Id < out.Containers[j].Id })
	return out, nil
}

func (r *fakeRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[req.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: c.Id, Metadata: c.Metadata, State: c.State,
		Image: c.Image, Labels: c.Labels}}, nil
}

// GetContainerEvents streams three events and ends.
func (r *fakeRuntime) GetContainerEvents(_ *runtimeapi.GetEventsRequest, s grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	for i := range 3 {
		if err := s.Send(&runtimeapi.ContainerEventResponse{ContainerId: fmt.Sprintf("c%d", i), ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT}); err != nil {
			return err
		}
	}
	return nil
}

func (r *fakeRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:app1", RepoTags: []string{"app:1"}, Size: 1 << 20}}}, nil
}

// deterministicCodec marshals protobuf messages the same way every time
// (maps in key order), so that two answers to the same question are
// byte-identical and the guard's pass-through can be compared byte for
// byte.
type deterministicCodec struct{}

func (deterministicCodec) Marshal(v any) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(v.(proto.Message))
}
func (deterministicCodec) Unmarshal(b []byte, v any) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (deterministicCodec) Name() string { return "proto" }
