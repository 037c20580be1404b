package localcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeClient speaks the CRI to a real node's containerd directly,
// around the node guard: to wait for it, to see what really runs, and to
// end every pod at teardown.
type runtimeClient struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

func dialRuntime(socket string) (*runtimeClient, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &runtimeClient{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

func (r *runtimeClient) close() { _ = r.conn.Close() }

// ready succeeds once the runtime answers and reports itself ready (its
// CNI configuration loaded).
func (r *runtimeClient) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := r.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.GetType() == runtimeapi.RuntimeReady && !c.GetStatus() {
			return fmt.Errorf("runtime not ready: %s %s", c.GetReason(), c.GetMessage())
		}
	}
	return nil
}

// removeAllPods stops and removes every sandbox, so that containerd tears
// down their networks and mounts and the containers end.
func (r *runtimeClient) removeAllPods(ctx context.Context) error {
	list, err := r.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list.GetItems() {
		if _, err := r.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := r.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RunningContainers counts, per pod UID, the containers a real node's
// runtime runs, asked of containerd itself: what a kill really ended,
// whatever the API says of the pod.
func (c *Cluster) RunningContainers(ctx context.Context, node string) (map[string]int, error) {
	all, err := c.RuntimeContainers(ctx, node)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, ctr := range all {
		if ctr.Running {
			out[ctr.PodUID]++
		}
	}
	return out, nil
}

// RuntimeContainer is one container as a real node's containerd has it.
// A container the kubelet restarts is a new one, with a new ID.
type RuntimeContainer struct {
	ID, SandboxID, PodUID, Name string
	Running                     bool
	// Attempt is the kubelet's restart count when it created it.
	Attempt uint32
	Created time.Time
}

// RuntimeContainers lists every container of a real node's containerd,
// running or not, asked past the node guard.
func (c *Cluster) RuntimeContainers(ctx context.Context, node string) ([]RuntimeContainer, error) {
	socket, err := c.RealNodeRuntime(node)
	if err != nil {
		return nil, err
	}
	rt, err := dialRuntime(socket)
	if err != nil {
		return nil, err
	}
	defer rt.close()
	list, err := rt.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	var out []RuntimeContainer
	for _, ctr := range list.GetContainers() {
		out = append(out, RuntimeContainer{
			ID: ctr.GetId(), SandboxID: ctr.GetPodSandboxId(), PodUID: ctr.GetLabels()["io.kubernetes.pod.uid"],
			Name: ctr.GetMetadata().GetName(), Running: ctr.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING,
			Attempt: ctr.GetMetadata().GetAttempt(), Created: time.Unix(0, ctr.GetCreatedAt()),
		})
	}
	return out, nil
}

// StopPodsOnRuntime stops the sandboxes of the pods with these UIDs on a
// real node's containerd, past the node guard: the way out the guard's
// refusal names for a pod the API no longer has. The kubelet then
// removes them (the guard lets a stopped pod's removal through).
func (c *Cluster) StopPodsOnRuntime(ctx context.Context, node string, uids []string) error {
	socket, err := c.RealNodeRuntime(node)
	if err != nil {
		return err
	}
	rt, err := dialRuntime(socket)
	if err != nil {
		return err
	}
	defer rt.close()
	var errs []error
	for _, uid := range uids {
		list, err := rt.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range list.GetItems() {
			if _, err := rt.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.GetId()}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
