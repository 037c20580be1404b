package drill

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

// kubeletBadRestart: key pods run on a real node, selected by a node
// label. The label is removed while the kubelet is down (a node
// re-labelled by an operator or a bad config rollout), and the kubelet
// comes back: at re-admission the pods no longer fit the node, so it marks
// them Failed (NodeAffinity) and kills their containers, though nobody
// deleted them in the API — the kubelet incident of the ByteDance report.
// Both sides run `rampart node-guard` between the kubelet and containerd;
// the protected side labels its pods rampart.io/explicit-deletion=true.
// The loss is counted in containerd, not from the API's phase. The API's
// reading is measured beside it: running_pods_read_failed counts the pods
// containerd still runs that the API reads Failed, and, since the key
// pods are a ReplicaSet's behind a Service, ready_endpoints_lost and
// replacements_created count what the business lost, at worst over 15 s
// after the pods were decided (11 s at test scale). Protected, all three are 0: the guard
// vouches for its running pods (condition rampart.io/ContainersRunning)
// and the compiled policy saved-pods.rampart.io refuses the kubelet's
// writes turning them Failed or not Ready as failed, so they stay
// Running, Ready, ready endpoints, unreplaced. Unprotected, the killed
// pods read Failed and run nothing (0 read Failed while running), every
// endpoint is lost and each pod is replaced.
var kubeletBadRestart = Drill{
	Name:     "kubelet-bad-restart",
	Incident: "a kubelet restarted after a node label its pods select on was removed rejects them at re-admission and kills them, though nobody deleted them (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		loss := keyPodLoss(t)
		if t.Local == nil {
			return loss, errors.New("the kubelet-bad-restart drill restarts a real node's kubelet: run `rampart drill` without --kubeconfig")
		}
		node, err := t.realNode(ctx)
		if err != nil {
			return loss, err
		}
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
		pods, err := t.startKeyPods(ctx, node, ns, "gold", loss.Total, map[string]string{tier: "gold"}, true)
		if err != nil {
			return loss, err
		}
		if t.Protected {
			// The kubelet writes Failed before it tries the kill: the
			// guard's word must be in the API first.
			if err := pods.vouched(ctx); err != nil {
				return loss, err
			}
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
		out, err := pods.outcome(ctx, restart, func(ctx context.Context) (map[types.UID]string, error) {
			return t.vetoedPods(ctx, ns)
		})
		if err != nil {
			return loss, err
		}
		loss.Lost, loss.Denied = out.lost, out.anyMessage()
		readFailed, err := pods.runningReadFailed(ctx)
		if err != nil {
			return loss, err
		}
		// What the business saw: its endpoints and its ReplicaSet, over
		// a kubelet status period and more after the pods were decided.
		hold := 15 * time.Second
		if t.Scale > 1 {
			hold = 11 * time.Second // one kubelet status period and a second
		}
		lostEndpoints, replaced, err := pods.servingLoss(ctx, hold)
		if err != nil {
			return loss, err
		}
		loss.Measured = map[string]float64{
			"ready_endpoints_lost":          float64(lostEndpoints),
			"replacements_created":          float64(replaced),
			"running_pods_read_failed":      float64(readFailed),
			"kubelet_ready_after_restart_s": seconds(ready),
			"all_killed_or_refused_s":       seconds(out.decided),
			"pods_refused_kill":             float64(len(out.refused)),
		}
		return loss, nil
	},
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

// vetoedPods are the pods of ns with a KillVetoed Warning Event, by UID,
// with one Event's message each.
func (t Target) vetoedPods(ctx context.Context, ns string) (map[types.UID]string, error) {
	selector := fields.Set{"reason": nodeguard.EventReason, "type": corev1.EventTypeWarning}.String()
	list, err := t.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[types.UID]string{}
	for _, e := range list.Items {
		out[e.InvolvedObject.UID] = e.Message
	}
	return out, nil
}
