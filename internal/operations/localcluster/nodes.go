package localcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// KwokNodeAnnotation (value "fake") marks the nodes kwok manages in the
// local cluster: without it kwok no longer renews the node's lease nor
// reports its status, as if the node had died.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// NodeLabel is set on every simulated node.
const NodeLabel = "rampart.io/simulated-node"

// AddNodes creates n more simulated nodes and waits until kwok has made them
// Ready. Nodes are named kwok-node-N, numbered after the existing ones.
func (c *Cluster) AddNodes(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	existing, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel})
	if err != nil {
		return err
	}
	first := len(existing.Items)
	names := make([]string, 0, n)
	for i := first; i < first+n; i++ {
		node := SimulatedNode(fmt.Sprintf("kwok-node-%d", i))
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		names = append(names, node.Name)
	}
	// One LIST a round, not a GET per node (500 GETs a round slowed a
	// loaded machine further), and more time for more nodes: kwok makes
	// them Ready one by one.
	timeout := startTimeout + time.Duration(n)*100*time.Millisecond
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.exitedEarly("kwok"); err != nil {
			return false, err
		}
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel})
		if err != nil {
			return false, nil
		}
		ready := map[string]bool{}
		for i := range list.Items {
			ready[list.Items[i].Name] = NodeReady(&list.Items[i])
		}
		for _, name := range names {
			if !ready[name] {
				return false, nil
			}
		}
		return true, nil
	})
}

// NodeReady says whether a node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SimulatedNode is a node kwok simulates once it is created: Ready, with
// room for 250 pods.
func SimulatedNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{KwokNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				NodeLabel:                "true",
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// waitDefaultServiceAccount waits for the service-account controller: until
// it has made "default" in the default namespace, pods cannot be created.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// SetHeartbeat stops or resumes a simulated node's heartbeat, as a machine
// that dies or comes back. kwok renews the Lease of every node it runs
// and updates its status only while it holds that Lease: stopping takes
// the Lease for another holder for a day (renewed once, now, then never),
// so the node lifecycle controller finds the node unreachable after its
// --node-monitor-grace-period (taints it, marks its pods not Ready, then
// deletes those whose tolerations expire); resuming clears the holder and
// kwok takes the Lease back within its renew interval.
func (c *Cluster) SetHeartbeat(ctx context.Context, node string, on bool) error {
	cs, err := c.Clientset()
	if err != nil {
		return err
	}
	return SetNodeHeartbeat(ctx, cs, node, on)
}

// SetNodeHeartbeat is Cluster.SetHeartbeat through any client of a
// cluster whose simulated nodes kwok runs (a drill's target).
func SetNodeHeartbeat(ctx context.Context, cs kubernetes.Interface, node string, on bool) error {
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if on {
			l.Spec.HolderIdentity = nil
		} else {
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To("rampart-stopped-heartbeat"), ptr.To(int32(86400)), &now
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}
