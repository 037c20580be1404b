package drill

import (
	"context"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// crdDeletion: in a meta-cluster where one custom resource describes each
// node of a member cluster, someone deletes the CRD; every custom resource
// goes with it and the controllers take the nodes offline (ByteDance).
var crdDeletion = Drill{
	Name:     "crd-deletion",
	Incident: "a meta-cluster CRD with one custom resource per node is deleted by mistake; every custom resource is deleted with it (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		group := t.Prefix + ".machines.drill.rampart.io"
		ns := t.Prefix + "-meta"
		n := 1000 / t.Scale
		loss := Loss{Total: n, Unit: "custom resources (one per node)"}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		c := crd("machines", "Machine", group, t.protection(v1alpha1.ProtectionCascading))
		gvr, err := t.createCRD(ctx, c)
		if err != nil {
			return loss, err
		}
		defer t.cleanupCRD(c.Name)
		nodes, err := t.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return loss, err
		}
		name := func(i int) string {
			if i < len(nodes.Items) {
				return nodes.Items[i].Name
			}
			return fmt.Sprintf("node-%04d", i)
		}
		if err := t.createCustomResources(ctx, gvr, "Machine", ns, n, name, nil); err != nil {
			return loss, err
		}
		deleteCRD := func(o metav1.DeleteOptions) error {
			return t.Ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, c.Name, o)
		}
		if err := t.untilGuarded(ctx, deleteCRD); err != nil {
			return loss, err
		}
		loss.Denied, err = deniedBy(deleteCRD(metav1.DeleteOptions{}))
		if err != nil {
			return loss, err
		}
		left, err := t.outcome(ctx, loss.Denied, t.crdGone(c.Name), func(ctx context.Context) (int, error) { return t.countCustomResources(ctx, gvr) })
		loss.Lost = n - left
		return loss, err
	},
}

// namespaceDeletion: a namespace with running workloads is deleted by
// mistake; the namespace controller deletes everything in it.
var namespaceDeletion = Drill{
	Name:     "namespace-deletion",
	Incident: "a namespace with running workloads is deleted by mistake; the namespace controller deletes every pod, workload and secret in it (ByteDance and OpenKruise reports)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		ns := t.Prefix + "-shop"
		per := int32(max(10/t.Scale, 1))
		apps := []string{"web", "cart", "payments"}
		loss := Loss{Total: len(apps) * int(per), Unit: "running pods"}
		if err := t.namespace(ctx, ns, t.protection(v1alpha1.ProtectionCascading)); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		for _, a := range apps {
			if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, deployment(a, per, map[string]string{"drill": "shop"}), metav1.CreateOptions{}); err != nil {
				return loss, err
			}
		}
		if err := t.waitRunning(ctx, ns, "", loss.Total); err != nil {
			return loss, err
		}
		var err error
		loss.Denied, err = deniedBy(t.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
		if err != nil {
			return loss, err
		}
		gone := func(ctx context.Context) (bool, error) {
			_, err := t.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}
		left, err := t.outcome(ctx, loss.Denied, gone, func(ctx context.Context) (int, error) { return t.runningPods(ctx, ns, "") })
		loss.Lost = loss.Total - left
		return loss, err
	},
}

// scaleToZeroTypo: a key Deployment is scaled to 0 by a typo (or a script
// with the wrong variable); every pod is stopped (OpenKruise report).
var scaleToZeroTypo = Drill{
	Name:     "scale-to-zero-typo",
	Incident: "a key Deployment is scaled to 0 by a typo in kubectl scale; every replica stops (OpenKruise report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		ns := t.Prefix + "-key"
		replicas := int32(max(20/t.Scale, 1))
		loss := Loss{Total: int(replicas), Unit: "running pods"}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		var labels map[string]string
		if t.Protected {
			labels = map[string]string{v1alpha1.LabelExplicitReplicas: "true"}
		}
		deploys := t.Client.AppsV1().Deployments(ns)
		if _, err := deploys.Create(ctx, deployment("checkout", replicas, labels), metav1.CreateOptions{}); err != nil {
			return loss, err
		}
		if err := t.waitRunning(ctx, ns, "app=checkout", int(replicas)); err != nil {
			return loss, err
		}
		typo := func(o metav1.DeleteOptions) error {
			scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "checkout", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}
			_, err := deploys.UpdateScale(ctx, "checkout", scale, metav1.UpdateOptions{DryRun: o.DryRun})
			return err
		}
		if err := t.untilGuarded(ctx, typo); err != nil {
			return loss, err
		}
		var err error
		loss.Denied, err = deniedBy(typo(metav1.DeleteOptions{}))
		if err != nil {
			return loss, err
		}
		count := func(ctx context.Context) (int, error) { return t.runningPods(ctx, ns, "app=checkout") }
		stopped := func(ctx context.Context) (bool, error) {
			n, err := count(ctx)
			return err == nil && n == 0, nil
		}
		left, err := t.outcome(ctx, loss.Denied, stopped, count)
		loss.Lost = int(replicas) - left
		return loss, err
	},
}

// chartUninstall: uninstalling a chart that templates its CRDs deletes the
// CRDs, and with them every custom resource users created: their data.
var chartUninstall = Drill{
	Name:     "chart-uninstall-crds",
	Incident: "uninstalling a chart deletes the CRDs it templated, and with them every custom resource users created (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		release := t.Prefix + "-db"
		ns := t.Prefix + "-data"
		chart := map[string]string{"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": release}
		n := max(50/t.Scale, 1)
		loss := Loss{Total: n, Unit: "custom resources (user data)"}
		if t.Protected {
			stop, err := t.protectChartCRDs(ctx)
			if err != nil {
				return loss, err
			}
			defer stop()
		}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		c := crd("backups", "Backup", t.Prefix+".db.drill.rampart.io", chart)
		gvr, err := t.createCRD(ctx, c)
		if err != nil {
			return loss, err
		}
		defer t.cleanupCRD(c.Name)
		if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, deployment("db-operator", 1, chart), metav1.CreateOptions{}); err != nil {
			return loss, err
		}
		if _, err := t.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db-operator-config", Labels: chart}}, metav1.CreateOptions{}); err != nil {
			return loss, err
		}
		// Users' data: created by users, not by the chart.
		if err := t.createCustomResources(ctx, gvr, "Backup", ns, n, func(i int) string { return fmt.Sprintf("nightly-%03d", i) }, nil); err != nil {
			return loss, err
		}
		// The uninstall deletes every object of the release.
		selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
		deleteCRDs := func(o metav1.DeleteOptions) error {
			return t.Ext.ApiextensionsV1().CustomResourceDefinitions().DeleteCollection(ctx, o, selector)
		}
		if err := t.untilGuarded(ctx, deleteCRDs); err != nil {
			return loss, err
		}
		if err := t.Client.AppsV1().Deployments(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
			return loss, err
		}
		if err := t.Client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, selector); err != nil {
			return loss, err
		}
		loss.Denied, err = deniedBy(deleteCRDs(metav1.DeleteOptions{}))
		if err != nil {
			return loss, err
		}
		left, err := t.outcome(ctx, loss.Denied, t.crdGone(c.Name), func(ctx context.Context) (int, error) { return t.countCustomResources(ctx, gvr) })
		loss.Lost = n - left
		return loss, err
	},
}

// protectChartCRDs has the platform team protect every CRD a Helm chart
// installs, with one policy instead of a label per CRD (Cascading: a CRD
// with custom resources left cannot be deleted), and returns how to
// remove the policy.
func (t Target) protectChartCRDs(ctx context.Context) (func(), error) {
	return t.policy(ctx, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: %s-chart-crds}
spec:
  resources: [{apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions]}]
  objectSelector: {matchLabels: {app.kubernetes.io/managed-by: Helm}}
  protection: Cascading`, t.Prefix))
}

var policiesGVR = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "protectionpolicies"}

// policy creates a ProtectionPolicy, waits until it is enforced, and
// returns how to remove it.
func (t Target) policy(ctx context.Context, manifest string) (func(), error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		return nil, err
	}
	if _, err := t.Dynamic.Resource(policiesGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	stop := func() {
		_ = t.Dynamic.Resource(policiesGVR).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	}
	err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := t.Dynamic.Resource(policiesGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("policy %s never became Ready: %w", u.GetName(), err)
	}
	return stop, nil
}

// outcome measures what is left after the mistake: when it went through,
// once its effect is done (done), then once the count holds still.
func (t Target) outcome(ctx context.Context, denied string, done func(context.Context) (bool, error), count func(context.Context) (int, error)) (int, error) {
	if denied == "" {
		if err := poll(ctx, settle, done); err != nil && !wait.Interrupted(err) {
			return 0, err
		}
	}
	return steady(ctx, count)
}

func (t Target) crdGone(name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, err := t.Ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}
}

// untilGuarded waits, on a protected target, until a dry run of the
// mistake is denied: Rampart's view and the API server's webhook
// configuration follow new objects through watches, within a moment. On an
// unprotected target it returns at once.
func (t Target) untilGuarded(ctx context.Context, mistake func(metav1.DeleteOptions) error) error {
	if !t.Protected {
		return nil
	}
	var last error
	err := poll(ctx, 30*time.Second, func(context.Context) (bool, error) {
		last = mistake(metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		d, _ := deniedBy(last)
		return d != "", nil
	})
	if err != nil {
		return fmt.Errorf("rampart never guarded the drill's objects (last answer to a dry run: %v): %w", last, err)
	}
	return nil
}
