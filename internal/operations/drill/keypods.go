package drill

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// keyPods are the pods a node-layer drill runs on a real node, followed
// in containerd: what the kubelet really ended, whatever the API says.
type keyPods struct {
	t    Target
	node string
	pods []corev1.Pod
	// served: the pods are a ReplicaSet's, behind a Service, both named
	// after the pods' app label (startKeyPods' serve).
	served string
}

// keyPodLoss is the loss of a node-layer drill before it runs: 24 key
// pods, or 4 at test scale (a real node starts its pods one sandbox at a
// time on these 2 cores), counted in containerd.
func keyPodLoss(t Target) Loss {
	n := 24
	if t.Scale > 1 {
		n = 4
	}
	return Loss{Total: n, Unit: "key pods killed (containers gone in containerd)"}
}

// realNode is the local cluster's first real node, started if it has
// none.
func (t Target) realNode(ctx context.Context) (string, error) {
	if len(t.Local.RealNodes()) == 0 {
		if err := t.Local.AddRealNodes(ctx, 1); err != nil {
			return "", err
		}
	}
	return t.Local.RealNodes()[0], nil
}

// startKeyPods creates n pods in ns, labelled app=NAME (and
// rampart.io/explicit-deletion=true on the protected side), on a real
// node through nodeSelector, and waits until the API has them Running
// and containerd runs a container of each. They are pods NAME-NN of
// their own, or, with serve, the pods of ReplicaSet NAME behind Service
// NAME: what losing them costs a business is then measured too (serving).
func (t Target) startKeyPods(ctx context.Context, node, ns, name string, n int, nodeSelector map[string]string, serve bool) (keyPods, error) {
	k := keyPods{t: t, node: node}
	labels := map[string]string{"app": name}
	if t.Protected {
		labels[v1alpha1.LabelExplicitDeletion] = "true"
	}
	if serve {
		k.served = name
		tmpl := localcluster.RealNodePod("", labels, nodeSelector)
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
		}}
		if _, err := t.Client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return k, err
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 80}},
		}}
		if _, err := t.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return k, err
		}
	} else {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%02d", name, i)
		}
		if err := parallel(ctx, names, func(ctx context.Context, name string) error {
			_, err := t.Client.CoreV1().Pods(ns).Create(ctx, localcluster.RealNodePod(name, labels, nodeSelector), metav1.CreateOptions{})
			return err
		}); err != nil {
			return k, err
		}
	}
	if err := t.waitRunning(ctx, ns, "app="+name, n); err != nil {
		return k, err
	}
	pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return k, err
	}
	k.pods = pods.Items
	if alive, err := k.running(ctx); err != nil {
		return k, err
	} else if n := countTrue(alive); n != len(k.pods) {
		return k, fmt.Errorf("%d of %d pods run in containerd before the incident", n, len(k.pods))
	}
	return k, nil
}

// running says, per pod, whether containerd runs a container of it.
func (k keyPods) running(ctx context.Context) (map[types.UID]bool, error) {
	byUID, err := k.t.Local.RunningContainers(ctx, k.node)
	out := map[types.UID]bool{}
	for _, p := range k.pods {
		out[p.UID] = byUID[string(p.UID)] > 0
	}
	return out, err
}

// vouched waits until the node guard vouches for every pod: the
// condition rampart.io/ContainersRunning=True, which the saved-pods
// policy reads before it refuses the node's write turning a pod Failed.
func (k keyPods) vouched(ctx context.Context) error {
	var have int
	err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		have = 0
		for _, p := range k.pods {
			got, err := k.t.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == v1alpha1.ConditionContainersRunning && c.Status == corev1.ConditionTrue {
					have++
				}
			}
		}
		return have == len(k.pods), nil
	})
	if err != nil {
		return fmt.Errorf("the node guard vouches for %d of %d pods (%s=True): %w", have, len(k.pods), v1alpha1.ConditionContainersRunning, err)
	}
	return nil
}

// runningReadFailed counts the pods containerd runs that the API reads
// Failed: saved by the guard, but out of their Services and replaced.
func (k keyPods) runningReadFailed(ctx context.Context) (int, error) {
	alive, err := k.running(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range k.pods {
		got, err := k.t.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if alive[p.UID] && got.Status.Phase == corev1.PodFailed {
			n++
		}
	}
	return n, nil
}

// servingLoss is what the served key pods (startKeyPods' serve) cost
// their business at worst over d from now: endpoints that are not ready
// endpoints of their Service any more (a pod read Failed or not Ready
// leaves them, and its traffic with it), and pods their ReplicaSet
// created in their place. Watched for d, not read once: the kubelet
// writes a pod's status again every 10 s.
func (k keyPods) servingLoss(ctx context.Context, d time.Duration) (lost, replaced int, err error) {
	ns := k.pods[0].Namespace
	ours := map[types.UID]bool{}
	for _, p := range k.pods {
		ours[p.UID] = true
	}
	until := time.Now().Add(d)
	for {
		slices, err := k.t.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + k.served})
		if err != nil {
			return lost, replaced, err
		}
		ready := map[types.UID]bool{}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.TargetRef != nil && ours[e.TargetRef.UID] && e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready[e.TargetRef.UID] = true
				}
			}
		}
		pods, err := k.t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + k.served})
		if err != nil {
			return lost, replaced, err
		}
		n := 0
		for _, p := range pods.Items {
			if !ours[p.UID] {
				n++
			}
		}
		lost, replaced = max(lost, len(k.pods)-len(ready)), max(replaced, n)
		if time.Now().After(until) {
			return lost, replaced, nil
		}
		select {
		case <-ctx.Done():
			return lost, replaced, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// uids are the pods' UIDs.
func (k keyPods) uids() []string {
	var out []string
	for _, p := range k.pods {
		out = append(out, string(p.UID))
	}
	return out
}

// podOutcome is what became of the key pods after an incident.
type podOutcome struct {
	// lost pods have no container left in containerd.
	lost int
	// refused are the pods whose kill the node guard refused, by UID,
	// with the message of one refusal each.
	refused map[types.UID]string
	// decided is when every pod was either killed or refused.
	decided time.Duration
}

// outcome waits until each pod is decided, its containers gone or its
// kill refused (refused reads the guard's reports), then, as the kubelet
// retries refused kills on each sync, until the count of lost pods holds.
func (k keyPods) outcome(ctx context.Context, since time.Time, refused func(context.Context) (map[types.UID]string, error)) (podOutcome, error) {
	var o podOutcome
	var alive map[types.UID]bool
	err := poll(ctx, settle, func(ctx context.Context) (bool, error) {
		var err error
		if alive, err = k.running(ctx); err != nil {
			return false, err
		}
		if o.refused, err = refused(ctx); err != nil {
			return false, err
		}
		for _, p := range k.pods {
			if alive[p.UID] && o.refused[p.UID] == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return o, fmt.Errorf("the kubelet neither killed nor was refused every pod within %s: %d running, %d refused: %w", settle, countTrue(alive), len(o.refused), err)
	}
	o.decided = time.Since(since)
	o.lost, err = steady(ctx, func(ctx context.Context) (int, error) {
		alive, err := k.running(ctx)
		return len(k.pods) - countTrue(alive), err
	})
	return o, err
}

// anyMessage is one of the refusals' messages, "" for none.
func (o podOutcome) anyMessage() string {
	for _, msg := range o.refused {
		return msg
	}
	return ""
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
