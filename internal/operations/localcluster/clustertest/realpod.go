package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// RealPod is a one-container pod running on a real node, with the
// container containerd ran for it when it started: what a test compares
// against to tell "kept running" from "killed" or "restarted".
type RealPod struct {
	Namespace, Name, Node string
	UID                   types.UID
	Container             localcluster.RuntimeContainer
}

// StartRealPod creates pod (see localcluster.RealNodePod) in ns on the
// real node, and waits until the API has it Running and containerd runs
// its container.
func (e *Env) StartRealPod(t testing.TB, node, ns string, pod *corev1.Pod) RealPod {
	t.Helper()
	pod.Spec.NodeName = node
	created, err := e.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return e.RealPodOf(t, node, ns, pod.Name, created.UID)
}

// RealPodOf waits until the API has the pod of this UID Running on the
// real node and containerd runs its container (a pod a controller
// created, say), and returns it as started.
func (e *Env) RealPodOf(t testing.TB, node, ns, name string, uid types.UID) RealPod {
	t.Helper()
	p := RealPod{Namespace: ns, Name: name, Node: node, UID: uid}
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = got.Status.Phase
		for _, c := range e.Containers(t, node) {
			if c.PodUID == string(p.UID) && c.Running {
				p.Container = c
			}
		}
		return phase == corev1.PodRunning && p.Container.ID != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not Running with a container in containerd within a minute (phase %q, container %q)", ns, name, phase, p.Container.ID)
	}
	return p
}

// RealPodChange says how the pod differs from when it started, in the
// API (UID, phase, deletion, restartCount, container ID) and in containerd
// (its containers); "" when it does not.
func (e *Env) RealPodChange(ctx context.Context, t testing.TB, p RealPod) string {
	t.Helper()
	pod, err := e.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("not in the API: %v", err)
	}
	switch {
	case pod.UID != p.UID:
		return fmt.Sprintf("UID %s, was %s", pod.UID, p.UID)
	case pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil:
		return fmt.Sprintf("phase %s, deletionTimestamp %v", pod.Status.Phase, pod.DeletionTimestamp)
	case len(pod.Status.ContainerStatuses) != 1:
		return fmt.Sprintf("%d container statuses", len(pod.Status.ContainerStatuses))
	}
	if cs := pod.Status.ContainerStatuses[0]; cs.RestartCount != 0 || cs.ContainerID != "containerd://"+p.Container.ID {
		return fmt.Sprintf("the API has container %s with restartCount %d, containerd ran %s", cs.ContainerID, cs.RestartCount, p.Container.ID)
	}
	var ours []localcluster.RuntimeContainer
	for _, c := range e.Containers(t, p.Node) {
		if c.PodUID == string(p.UID) {
			ours = append(ours, c)
		}
	}
	if len(ours) != 1 || ours[0] != p.Container {
		return fmt.Sprintf("containerd has %+v, ran %+v", ours, p.Container)
	}
	return ""
}
