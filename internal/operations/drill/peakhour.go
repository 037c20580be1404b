package drill

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

var windowsGVR = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "changewindows"}

// peakHourRollout: an image change is pushed at peak time to a workload
// whose business allows changes only off-peak; a bad image then reaches
// every user at once (ByteDance report). The loss is the replicas rolled to
// the new image outside the window. Protected, the change is denied; an
// on-call engineer the window names may still push it, and it is recorded.
var peakHourRollout = Drill{
	Name:     "peak-hour-rollout",
	Incident: "an image change is rolled out at peak time to a workload whose business allows changes only off-peak (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		ns := t.Prefix + "-live"
		replicas := int32(max(10/t.Scale, 1))
		loss := Loss{Total: int(replicas), Unit: "replicas changed at peak"}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		deploys := t.Client.AppsV1().Deployments(ns)
		if _, err := deploys.Create(ctx, deployment("live", replicas, map[string]string{"tier": "frontend"}), metav1.CreateOptions{}); err != nil {
			return loss, err
		}
		if err := t.waitRunning(ctx, ns, "app=live", int(replicas)); err != nil {
			return loss, err
		}
		if t.Protected {
			// Off-peak is an hour, twelve hours from now: now is peak.
			off := time.Now().UTC().Add(12 * time.Hour)
			if err := t.window(ctx, ns, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: off-peak}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  selector: {matchLabels: {tier: frontend}}
  fields: ["spec.template.spec.containers[*].image"]
  schedules: [{days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "%s", end: "%s"}]
  override: {users: [oncall]}`, off.Format("15:04"), off.Add(time.Hour).Format("15:04"))); err != nil {
				return loss, err
			}
		}
		rollout := func(client kubernetes.Interface, image, override string, dryRun bool) error {
			ann := ""
			if override != "" {
				ann = fmt.Sprintf(`"metadata":{"annotations":{"rampart.io/change-override":%q}},`, override)
			}
			patch := fmt.Sprintf(`{%s"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, ann, image)
			opts := metav1.PatchOptions{}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := client.AppsV1().Deployments(ns).Patch(ctx, "live", types.StrategicMergePatchType, []byte(patch), opts)
			return err
		}
		if err := t.untilGuarded(ctx, func(o metav1.DeleteOptions) error {
			return rollout(t.Client, "registry.example/app:peak", "", len(o.DryRun) > 0)
		}); err != nil {
			return loss, err
		}
		var err error
		if loss.Denied, err = deniedBy(rollout(t.Client, "registry.example/app:peak", "", false)); err != nil {
			return loss, err
		}
		// The loss: replicas now specified with the peak-time image.
		d, err := deploys.Get(ctx, "live", metav1.GetOptions{})
		if err != nil {
			return loss, err
		}
		if d.Spec.Template.Spec.Containers[0].Image == "registry.example/app:peak" {
			loss.Lost = int(replicas)
		}
		if t.Protected {
			// An on-call engineer the window names can still push a hotfix.
			cfg := rest.CopyConfig(t.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: "oncall", Groups: []string{"system:masters"}}
			oncall, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return loss, err
			}
			if err := rollout(oncall, "registry.example/app:hotfix", "drill: emergency hotfix", false); err != nil {
				return loss, fmt.Errorf("the override by a named on-call user was refused: %w", err)
			}
			if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
				evs, err := t.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=live,reason=ChangeOverride"})
				return err == nil && len(evs.Items) > 0, nil
			}); err != nil {
				return loss, fmt.Errorf("the override was not recorded as an Event: %w", err)
			}
		}
		return loss, nil
	},
}

// window creates a ChangeWindow and waits until it is enforced.
func (t Target) window(ctx context.Context, ns, manifest string) error {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		return err
	}
	_, err := t.Dynamic.Resource(windowsGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}
