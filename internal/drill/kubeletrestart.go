package drill

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/localcluster"
	"github.com/rampart-io/rampart/internal/nodeguard"
)

// kubeletBadRestart: key pods run on a real node, selected by a node
// label. The label is removed while the kubelet is down (a node
// re-labelled by an operator or a bad config rollout), and the kubelet
// comes back: at re-admission the pods no longer fit the node, so it marks
// them Failed (NodeAffinity) and kills their containers, though nobody
// deleted them in the API — the kubelet incident of the ByteDance report.
// Both sides run `rampart node-guard` between the kubelet and containerd;
// the protected side labels its pods rampart.io/explicit-deletion=true.
// The loss is counted in containerd, not from the API's phase: a pod the
// guard saved may still read Failed.
var kubeletBadRestart = Drill{
	Name:     "kubelet-bad-restart",
	Incident: "a kubelet restarted after a node label its pods select on was removed rejects them at re-admission and kills them, though nobody deleted them (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		// A real node starts its pods one sandbox at a time on these 2
		// cores: a test-scale run keeps to 4.
		n := 24
		if t.Scale > 1 {
			n = 4
		}
		loss := Loss{Total: n, Unit: "key pods killed (containers gone in containerd)"}
		if t.Local == nil {
			return loss, errors.New("the kubelet-bad-restart drill restarts a real node's kubelet: run `rampart drill` without --kubeconfig")
		}
		if len(t.Local.RealNodes()) == 0 {
			if err := t.Local.AddRealNodes(ctx, 1); err != nil {
				return loss, err
			}
		}
		node := t.Local.RealNodes()[0]
		ns := t.Prefix + "-gold"
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		tier := "drill.rampart.io/tier-" + t.Prefix
		if err := t.labelNode(ctx, node, tier, "gold"); err != nil {
			return loss, err
		}
		defer func() { _ = t.labelNode(context.Background(), node, tier, "") }()
		labels := map[string]string{"app": "gold"}
		if t.Protected {
			labels[v1alpha1.LabelExplicitDeletion] = "true"
		}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("gold-%02d", i)
		}
		if err := parallel(ctx, names, func(ctx context.Context, name string) error {
			_, err := t.Client.CoreV1().Pods(ns).Create(ctx, localcluster.RealNodePod(name, labels, map[string]string{tier: "gold"}), metav1.CreateOptions{})
			return err
		}); err != nil {
			return loss, err
		}
		if err := t.waitRunning(ctx, ns, "app=gold", n); err != nil {
			return loss, err
		}
		pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gold"})
		if err != nil {
			return loss, err
		}
		running := func(ctx context.Context) (map[types.UID]bool, error) {
			byUID, err := t.Local.RunningContainers(ctx, node)
			out := map[types.UID]bool{}
			for _, p := range pods.Items {
				out[p.UID] = byUID[string(p.UID)] > 0
			}
			return out, err
		}
		if before, err := running(ctx); err != nil {
			return loss, err
		} else if alive := countTrue(before); alive != n {
			return loss, fmt.Errorf("%d of %d pods run in containerd before the restart", alive, n)
		}

		// The incident: kubelet down, label gone, kubelet up.
		kubelet := localcluster.KubeletName(node)
		if err := t.Local.StopComponent(kubelet); err != nil {
			return loss, err
		}
		if err := t.labelNode(ctx, node, tier, ""); err != nil {
			return loss, err
		}
		restart := time.Now()
		if err := t.Local.StartComponent(kubelet); err != nil {
			return loss, err
		}
		if err := t.Local.WaitRealNodeReady(ctx, node); err != nil {
			return loss, err
		}
		ready := time.Since(restart)

		// Every pod is decided once its containers are gone or the guard
		// refused its kill; the kubelet retries refused kills on each sync,
		// so the count is then watched until it holds.
		var alive map[types.UID]bool
		var vetoed map[string]string
		err = poll(ctx, settle, func(ctx context.Context) (bool, error) {
			if alive, err = running(ctx); err != nil {
				return false, err
			}
			if vetoed, err = t.vetoedPods(ctx, ns); err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				if alive[p.UID] && vetoed[p.Name] == "" {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return loss, fmt.Errorf("the restarted kubelet neither killed nor was refused every pod within %s: %d running, %d refused: %w", settle, countTrue(alive), len(vetoed), err)
		}
		decided := time.Since(restart)
		loss.Lost, err = steady(ctx, func(ctx context.Context) (int, error) {
			alive, err := running(ctx)
			return n - countTrue(alive), err
		})
		if err != nil {
			return loss, err
		}
		for _, msg := range vetoed {
			loss.Denied = msg
			break
		}
		loss.Measured = map[string]float64{
			"kubelet_ready_after_restart_s": seconds(ready),
			"all_killed_or_refused_s":       seconds(decided),
			"pods_refused_kill":             float64(len(vetoed)),
		}
		return loss, nil
	},
}

func countTrue[K comparable](m map[K]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// labelNode sets key=value on a node, or removes key for "".
func (t Target) labelNode(ctx context.Context, node, key, value string) error {
	v := `"` + value + `"`
	if value == "" {
		v = "null"
	}
	patch := []byte(`{"metadata":{"labels":{"` + key + `":` + v + `}}}`)
	_, err := t.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// vetoedPods are the pods of ns with a KillVetoed Warning Event, with one
// Event's message each.
func (t Target) vetoedPods(ctx context.Context, ns string) (map[string]string, error) {
	selector := fields.Set{"reason": nodeguard.EventReason, "type": corev1.EventTypeWarning}.String()
	list, err := t.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range list.Items {
		out[e.InvolvedObject.Name] = e.Message
	}
	return out, nil
}
