package quota

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// The reads and writes of a plan, shared by `rampart quota plan` and the
// pod-creation-surge drill.

// counted maps the quota's object counts to the resources listed for them.
var counted = map[corev1.ResourceName]schema.GroupVersionResource{
	"count/configmaps":             {Version: "v1", Resource: "configmaps"},
	"count/secrets":                {Version: "v1", Resource: "secrets"},
	"count/services":               {Version: "v1", Resource: "services"},
	"count/persistentvolumeclaims": {Version: "v1", Resource: "persistentvolumeclaims"},
	"count/deployments.apps":       {Group: "apps", Version: "v1", Resource: "deployments"},
	"count/jobs.batch":             {Group: "batch", Version: "v1", Resource: "jobs"},
}

// Observe is a namespace's use now: its pods' and its objects' counts
// (metadata only: Secrets are counted, never read).
func Observe(ctx context.Context, cs kubernetes.Interface, md metadata.Interface, ns string) (Observed, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Observed{}, err
	}
	ps := make([]Pod, len(pods.Items))
	for i := range pods.Items {
		ps[i] = Summarize(&pods.Items[i])
	}
	d := LimitDefaults(ps)
	cur := PodUse(ps, d)
	for _, name := range Counted {
		list, err := md.Resource(counted[name]).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return Observed{}, fmt.Errorf("counting %s in %s: %w", counted[name].Resource, ns, err)
		}
		cur[name] = *resource.NewQuantity(int64(len(list.Items)), resource.DecimalSI)
	}
	return Observed{Namespace: ns, Current: cur, Defaults: d}, nil
}

// Apply applies p server-side (field manager rampart), the LimitRange
// first: once the quota caps requests, pods without them are admitted only
// with the LimitRange's defaults.
func Apply(ctx context.Context, cs kubernetes.Interface, p Plan) error {
	opts := metav1.ApplyOptions{FieldManager: "rampart", Force: true}
	item := p.LimitRange.Spec.Limits[0]
	lr := corev1ac.LimitRange(Name, p.Namespace).WithLabels(p.LimitRange.Labels).
		WithSpec(corev1ac.LimitRangeSpec().WithLimits(corev1ac.LimitRangeItem().
			WithType(item.Type).WithDefault(item.Default).WithDefaultRequest(item.DefaultRequest)))
	if _, err := cs.CoreV1().LimitRanges(p.Namespace).Apply(ctx, lr, opts); err != nil {
		return fmt.Errorf("applying limitrange/%s in %s: %w", Name, p.Namespace, err)
	}
	rq := corev1ac.ResourceQuota(Name, p.Namespace).WithLabels(p.Quota.Labels).
		WithSpec(corev1ac.ResourceQuotaSpec().WithHard(p.Quota.Spec.Hard))
	if _, err := cs.CoreV1().ResourceQuotas(p.Namespace).Apply(ctx, rq, opts); err != nil {
		return fmt.Errorf("applying resourcequota/%s in %s: %w", Name, p.Namespace, err)
	}
	return nil
}
