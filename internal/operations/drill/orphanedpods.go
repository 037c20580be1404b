package drill

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

// orphanedPods: key pods run on a real node, and their objects are
// removed from etcd directly, as a damaged store or a restore from an
// older copy removes them. The API server's watch cache drops them, the
// kubelet no longer finds them in the API and kills them as orphans
// (HandlePodCleanups, with a 1 s grace), though nobody deleted them —
// the control-plane case of the ByteDance report (kubernetes#56212,
// #131115). Both sides run `rampart node-guard`; the protected side
// labels its pods rampart.io/explicit-deletion=true. The pods are gone
// from the API either way, so the loss is counted in containerd, and a
// refusal is reported on the Node (there is no pod to put it on).
var orphanedPods = Drill{
	Name:     "orphaned-pods",
	Incident: "pods removed from etcd directly (control-plane data damaged, or restored from an older copy) are killed by the kubelet as orphans, though nobody deleted them (ByteDance report; kubernetes#56212, #131115)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		loss := keyPodLoss(t)
		if t.Local == nil {
			return loss, errors.New("the orphaned-pods drill removes pods from the local cluster's etcd and counts containers on its real node: run `rampart drill` without --kubeconfig")
		}
		node, err := t.realNode(ctx)
		if err != nil {
			return loss, err
		}
		ns := t.Prefix + "-orphans"
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		pods, err := t.startKeyPods(ctx, node, ns, "orphan", loss.Total, map[string]string{localcluster.RealNodeLabel: "true"}, false)
		if err != nil {
			return loss, err
		}
		// The pods the guard keeps have no API object left to delete: end
		// them as its refusal says, on the runtime past the guard.
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = t.Local.StopPodsOnRuntime(ctx, node, pods.uids())
		}()
		vetoesBefore, err := t.vanishedVetoes(ctx, node)
		if err != nil {
			return loss, err
		}

		// The incident: the pods' keys removed from etcd.
		cli, err := t.dialEtcd(ctx, localcluster.EtcdAPIServerUser)
		if err != nil {
			return loss, err
		}
		defer cli.Close()
		removed := time.Now()
		for _, p := range pods.pods {
			if r, err := cli.Delete(ctx, "/registry/pods/"+ns+"/"+p.Name); err != nil {
				return loss, err
			} else if r.Deleted != 1 {
				return loss, fmt.Errorf("pod %s/%s was not in etcd under /registry/pods", ns, p.Name)
			}
		}
		// The API no longer lists them: what the kubelet and the guard see.
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			l, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=orphan"})
			return err == nil && len(l.Items) == 0, err
		}); err != nil {
			return loss, fmt.Errorf("the API server still lists the pods removed from etcd: %w", err)
		}
		gone := time.Since(removed)

		out, err := pods.outcome(ctx, removed, func(ctx context.Context) (map[types.UID]string, error) {
			return t.vetoedOnNode(ctx, node)
		})
		if err != nil {
			return loss, err
		}
		vetoesAfter, err := t.vanishedVetoes(ctx, node)
		if err != nil {
			return loss, err
		}
		loss.Lost, loss.Denied = out.lost, out.anyMessage()
		loss.Measured = map[string]float64{
			"gone_from_api_s":         seconds(gone),
			"all_killed_or_refused_s": seconds(out.decided),
			"pods_refused_kill":       float64(len(out.refused)),
			"guard_vanished_vetoes":   vetoesAfter - vetoesBefore,
		}
		return loss, nil
	},
}

// vetoedOnNode are the pods a KillVetoed Warning Event on the Node names
// as its related object, by UID, with one Event's message each: the
// guard's report of a pod the API no longer has.
func (t Target) vetoedOnNode(ctx context.Context, node string) (map[types.UID]string, error) {
	selector := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node,
		"reason": nodeguard.EventReason, "type": corev1.EventTypeWarning}.String()
	list, err := t.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[types.UID]string{}
	for _, e := range list.Items {
		if e.Related != nil && e.Related.Kind == "Pod" {
			out[e.Related.UID] = e.Message
		}
	}
	return out, nil
}

var vanishedVetoLine = regexp.MustCompile(`(?m)^rampart_nodeguard_vetoes_total\{call="[^"]*",reason="` + nodeguard.ReasonVanished + `"\} (\S+)$`)

// vanishedVetoes is the node guard's count of refusals of pods gone from
// the API (rampart_nodeguard_vetoes_total{reason="VanishedFromAPI"}, every
// call).
func (t Target) vanishedVetoes(ctx context.Context, node string) (float64, error) {
	metrics, err := t.Local.NodeGuardMetrics(ctx, node)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, m := range vanishedVetoLine.FindAllStringSubmatch(metrics, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}
