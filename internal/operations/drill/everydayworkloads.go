package drill

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// rollingUpdate: a new image rolls out to a 20-replica Deployment whose
// pods take 2 s to start, with the default strategy (25% unavailable, 25%
// surge). Protected, the Deployment asks for a generated budget, sized
// from that strategy: the Deployment controller's own pace should never
// need more.
var rollingUpdate = Operation{
	Name: "rolling-update",
	What: "a new image rolls out to a 20-replica Deployment (pods Ready 2 s after start, 25% unavailable, 25% surge); " +
		"protected: rampart.io/generate-pub",
	Run: func(ctx context.Context, t Target) (Timing, error) {
		return t.timedRollout(ctx, t.Prefix+"-rollout", nil)
	},
}

// timedRollout creates a 20-replica application under a generated budget
// in ns, rolls a new image out to it and times that until every replica is
// updated and available; midway, once a third of the replicas are
// updated, it calls midway (when not nil) and waits for it too.
func (t Target) timedRollout(ctx context.Context, ns string, midway func(context.Context) error) (Timing, error) {
	var tm Timing
	replicas := int32(max(20/t.Scale, 4))
	defer t.cleanupNamespace(ns)
	if err := t.opsNamespace(ctx, ns); err != nil {
		return tm, err
	}
	d := appDeployment("web", replicas, 2*time.Second)
	if err := t.createApp(ctx, ns, d, t.generatedBudget(d)); err != nil {
		return tm, err
	}
	refusals, err := t.watchRefusals(ctx, []string{ns})
	if err != nil {
		return tm, err
	}
	start := time.Now()
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/app:2"}]}}}}`)
	if _, err := t.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return tm, err
	}
	midwayDone := make(chan error, 1)
	called := midway == nil
	var last string
	err = poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		done, d, err := t.rolledOut(ctx, ns, "web")
		if err != nil {
			return false, nil
		}
		last = fmt.Sprintf("%d replicas, %d updated, %d available", d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas)
		if !called && 3*d.Status.UpdatedReplicas >= replicas {
			called = true
			go func() { midwayDone <- midway(ctx) }()
		}
		return done, nil
	})
	tm.Took, tm.Done = time.Since(start), err == nil
	if err != nil && !wait.Interrupted(err) {
		return tm, err
	}
	if midway != nil {
		if !called {
			return tm, fmt.Errorf("the rollout never got a third of the way (%s)", last)
		}
		if err := <-midwayDone; err != nil {
			return tm, err
		}
	}
	return tm, refusals.settle(ctx, &tm, nil, nil)
}

// autoscalerUser is the horizontal-pod-autoscaler's identity:
// kube-controller-manager runs each controller with its own service
// account (--use-service-account-credentials).
var autoscalerUser = rest.ImpersonationConfig{
	UserName: "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
	Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
}

// autoscalerSync is the horizontal-pod-autoscaler's sync period: a scale
// it could not write is tried again that much later.
const autoscalerSync = 15 * time.Second

// hpaScale: a HorizontalPodAutoscaler scales a Deployment down to a
// quarter and back up. kwok runs no metrics server, so the autoscaler's
// decisions are written as it writes them, to the scale subresource as its
// service account (impersonated). Protected, the Deployment is labelled
// rampart.io/explicit-replicas and asks for a generated budget; the
// autoscaler is exempt from the label (the chart's default,
// --replicas-exempt-service-accounts kube-system:horizontal-pod-autoscaler),
// and the budget should not hold back the pods a scale-down removes.
var hpaScale = Operation{
	Name: "hpa-scale",
	What: "the horizontal-pod-autoscaler scales a 20-replica Deployment to 5 and back (its scale writes made as its service account, " +
		"impersonated: kwok has no metrics); protected: rampart.io/explicit-replicas (autoscaler exempt, as the chart has it), rampart.io/generate-pub and a budget per node",
	Run: func(ctx context.Context, t Target) (Timing, error) {
		var tm Timing
		ns := t.Prefix + "-hpa"
		high := int32(max(20/t.Scale, 4))
		low := max(high/4, 1)
		defer t.cleanupNamespace(ns)
		if err := t.opsNamespace(ctx, ns); err != nil {
			return tm, err
		}
		d := appDeployment("web", high, 2*time.Second)
		if t.Protected {
			d.Labels = map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
		}
		if err := t.createApp(ctx, ns, d, t.generatedBudget(d)); err != nil {
			return tm, err
		}
		// The autoscaler the user applies; with no metrics it leaves the
		// replicas alone between its bounds.
		hpa := &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
				MinReplicas:    ptr.To[int32](1), MaxReplicas: 2 * high,
				Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
					Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				}}},
			},
		}
		if _, err := t.Client.AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			return tm, err
		}
		cfg := rest.CopyConfig(t.Config)
		cfg.Impersonate = autoscalerUser
		autoscaler, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return tm, err
		}
		refusals, err := t.watchRefusals(ctx, []string{ns})
		if err != nil {
			return tm, err
		}
		if t.Protected {
			// Beside the generated budget, one per node (each node's pods
			// a group): a group is sized by the pods it has, not by the
			// Deployment's replicas, so the ReplicaSet controller's
			// scale-down deletes are what it must not hold back. Created
			// the moment before the scale, as a budget holds from then.
			if err := t.budget(ctx, ns, `
apiVersion: rampart.io/v1alpha1
kind: PodUnavailableBudget
metadata: {name: web-per-node}
spec:
  selector: {matchLabels: {app: web}}
  groupBy: {labelKey: kubernetes.io/hostname}
  maxUnavailable: 1`); err != nil {
				return tm, err
			}
		}
		start := time.Now()
		deadline := start.Add(3 * time.Minute)
		tm.Measured = map[string]float64{}
		for _, step := range []struct {
			replicas int32
			figure   string
		}{{low, "scale_down_s"}, {high, "scale_up_s"}} {
			began := time.Now()
			if err := scaleAs(ctx, autoscaler, ns, "web", step.replicas, deadline); err != nil {
				tm.Took = time.Since(start)
				return tm, refusals.settle(ctx, &tm, err, nil)
			}
			// Done: exactly that many pods, all Ready.
			err := poll(ctx, time.Until(deadline), func(ctx context.Context) (bool, error) {
				pods, err := t.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
				if err != nil {
					return false, nil
				}
				ready := 0
				for _, p := range pods.Items {
					if p.DeletionTimestamp == nil && podReady(&p) {
						ready++
					}
				}
				return len(pods.Items) == int(step.replicas) && ready == int(step.replicas), nil
			})
			tm.Measured[step.figure] = seconds(time.Since(began))
			if err != nil {
				tm.Took = time.Since(start)
				if !wait.Interrupted(err) {
					return tm, err
				}
				return tm, refusals.settle(ctx, &tm, nil, nil)
			}
		}
		tm.Took, tm.Done = time.Since(start), true
		return tm, refusals.settle(ctx, &tm, nil, nil)
	},
}

// scaleAs writes replicas to a Deployment's scale subresource as the
// autoscaler does (read, then update); a write refused is tried again at
// the autoscaler's next sync, until deadline.
func scaleAs(ctx context.Context, cs kubernetes.Interface, ns, name string, replicas int32, deadline time.Time) error {
	for {
		s, err := cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
		if err == nil {
			s.Spec.Replicas = replicas
			_, err = cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, &autoscalingv1.Scale{ObjectMeta: s.ObjectMeta, Spec: s.Spec}, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			continue
		case time.Now().Add(autoscalerSync).After(deadline):
			return fmt.Errorf("the autoscaler's scale of %s/%s to %d was never written: %w", ns, name, replicas, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(autoscalerSync):
		}
	}
}
