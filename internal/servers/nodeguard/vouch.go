package nodeguard

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// The guard vouches, in the API, for the pods whose kills it refuses: it
// keeps the condition rampart.io/ContainersRunning on each pod labelled
// rampart.io/explicit-deletion=true of its node (restartPolicy Always, not
// deleted, not terminal), True while the runtime runs a regular container
// of the pod, False once none runs. The compiled policy
// saved-pods.rampart.io (internal/protection/compiled.SavedPods) refuses
// the node's status write that turns such a pod Failed while the
// condition reads True: the kubelet writes Failed before it kills a pod
// it rejects at admission or evicts, the guard refuses the kill, and
// without the policy the API would read a running pod as Failed (out of
// its Service's endpoints, replaced by its ReplicaSet, and Failed for
// good once the node is fixed).
//
// Why the guard and not the kubelet's write: the kubelet's write says
// nothing of the containers (a rejected pod's status has none; an evicted
// pod's is written before the kill), and the guard is what decides
// whether they stop. It reads the runtime, not its own verdicts: a
// container that exits on its own, or a kill it lets through
// (activeDeadlineSeconds), turns the condition False at the next round,
// and the kubelet's next retry of its status write (every 10 s) goes
// through. So the API never reads Running for long a pod whose
// containers really ended, as long as the guard runs; a node without the
// guard never has the condition.

// DefaultVouchEvery is how often the guard reconciles the condition with
// the runtime: one ListContainers call, and a status patch only for the
// pods whose condition changes. It bounds how long a pod whose containers
// ended may still read Running (plus the kubelet's 10 s status retry).
const DefaultVouchEvery = 5 * time.Second

// Vouching is what the guard needs of the API to keep the condition: the
// node's pods, and a patch of one pod's status.
type Vouching interface {
	List() []*corev1.Pod
	PatchCondition(ctx context.Context, pod *corev1.Pod, c corev1.PodCondition) error
}

// Reasons of the condition.
const (
	ReasonRegularContainerRunning   = "RegularContainerRunning"
	ReasonNoRegularContainerRunning = "NoRegularContainerRunning"
)

// vouched says whether the guard keeps the condition on pod: labelled,
// restartPolicy Always, neither deleted nor terminal. The saved-pods
// policy covers the same pods.
func vouched(pod *corev1.Pod) bool {
	return pod.Labels[v1alpha1.LabelExplicitDeletion] == "true" && pod.DeletionTimestamp == nil &&
		(pod.Spec.RestartPolicy == "" || pod.Spec.RestartPolicy == corev1.RestartPolicyAlways) &&
		pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
}

// ContainersRunningCondition is the condition pod should carry when a
// regular container of it runs (running) or not, and whether it differs
// from the one the pod carries. A pod that never ran one gets none: a pod
// not started yet has nothing to vouch for.
func ContainersRunningCondition(pod *corev1.Pod, running bool, now time.Time) (corev1.PodCondition, bool) {
	c := corev1.PodCondition{
		Type:               v1alpha1.ConditionContainersRunning,
		Status:             corev1.ConditionFalse,
		Reason:             ReasonNoRegularContainerRunning,
		Message:            "rampart node-guard: no regular container of this pod runs in the runtime; the node may report it ended",
		LastTransitionTime: metav1.NewTime(now),
	}
	if running {
		c.Status, c.Reason = corev1.ConditionTrue, ReasonRegularContainerRunning
		c.Message = "rampart node-guard: a regular container of this pod runs in the runtime, and the guard refuses to stop it unless the API asks; the node may not report the pod Failed meanwhile (saved-pods.rampart.io)"
	}
	if !vouched(pod) {
		return c, false
	}
	for _, have := range pod.Status.Conditions {
		if have.Type == c.Type {
			return c, have.Status != c.Status
		}
	}
	return c, running
}

// vouchStats are the last round's counts, for the metrics.
type vouchStats struct {
	// vouched: pods whose condition the guard holds True.
	vouched atomic.Int64
	// saved: of those, pods whose kill the guard refused within its
	// kill memory — the kubelet is trying to end them.
	saved atomic.Int64
}

// vouch reconciles the condition every o.VouchEvery until ctx ends.
func (g *Guard) vouch(ctx context.Context) {
	t := time.NewTicker(g.o.VouchEvery)
	defer t.Stop()
	for {
		if err := g.vouchOnce(ctx); err != nil && ctx.Err() == nil {
			g.o.Log.Warn("node guard: cannot reconcile the pods' "+v1alpha1.ConditionContainersRunning+" condition this round", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// vouchOnce is one round: the runtime's running containers, then a patch
// for each pod whose condition changes. Nothing is written while the
// guard's view of the API is stale: a pod deleted or unlabelled
// meanwhile must not be vouched for on old news.
func (g *Guard) vouchOnce(ctx context.Context) error {
	now := g.o.Now()
	if ok, _ := g.o.Pods.Reachable(now); !ok {
		return nil
	}
	l, err := g.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return err
	}
	running := map[types.UID][]string{}
	for _, c := range l.GetContainers() {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		uid := types.UID(c.GetLabels()[labelPodUID])
		running[uid] = append(running[uid], containerName(c.GetLabels(), c.GetMetadata()))
	}
	var vouchedN, savedN int64
	var firstErr error
	for _, pod := range g.o.Vouch.List() {
		regular := false
		for _, name := range running[pod.UID] {
			if c, _ := specContainer(pod, name); c != nil && !containerIsInit(pod, name) {
				regular = true
			}
		}
		c, write := ContainersRunningCondition(pod, regular, now)
		if regular && vouched(pod) {
			vouchedN++
			if g.memory.killSeen(pod.UID, now) {
				savedN++
			}
		}
		if !write {
			continue
		}
		if err := g.o.Vouch.PatchCondition(ctx, pod, c); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		g.o.Metrics.conditionWrites.WithLabelValues(string(c.Status)).Inc()
		g.o.Log.Info("node guard: set the pod's "+v1alpha1.ConditionContainersRunning+" condition", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "status", c.Status)
	}
	g.stats.vouched.Store(vouchedN)
	g.stats.saved.Store(savedN)
	return firstErr
}

// List is every pod of the node the cache holds.
func (n *NodePods) List() []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range n.informer.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// PatchCondition sets one condition of the pod's status, by a strategic
// merge patch (conditions merge by type: the kubelet's are untouched),
// on the pod of this UID only.
func (n *NodePods) PatchCondition(ctx context.Context, pod *corev1.Pod, c corev1.PodCondition) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"conditions": []corev1.PodCondition{c}},
	})
	if err != nil {
		return err
	}
	_, err = n.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
