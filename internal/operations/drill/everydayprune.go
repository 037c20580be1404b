package drill

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// gitopsPrune: a GitOps tool prunes what left the repository: half of an
// application's ConfigMaps, a retired worker (its Service, and its
// Deployment in the foreground, as Argo CD prunes) and a whole retired
// namespace holding a running Deployment. None of it is protected;
// protected, the workloads ask for generated budgets, as every workload
// of the cluster does, and a ConfigMap left in place is labelled Always.
var gitopsPrune = Operation{
	Name: "gitops-prune",
	What: "a GitOps prune deletes 20 ConfigMaps, a worker Deployment (foreground) and its Service, and a namespace with a running " +
		"10-replica Deployment; protected: every Deployment under rampart.io/generate-pub, a kept ConfigMap labelled Always",
	Run: func(ctx context.Context, t Target) (Timing, error) {
		var tm Timing
		app, retired := t.Prefix+"-gitops", t.Prefix+"-retired"
		n := max(40/t.Scale, 10)
		replicas := int32(max(10/t.Scale, 4))
		defer t.cleanupNamespace(retired)
		defer t.cleanupNamespace(app)
		for _, ns := range []string{app, retired} {
			if err := t.opsNamespace(ctx, ns); err != nil {
				return tm, err
			}
		}
		var configs []string
		for i := range n {
			configs = append(configs, fmt.Sprintf("config-%03d", i))
		}
		kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Labels: t.protection(v1alpha1.ProtectionAlways)}}
		if _, err := t.Client.CoreV1().ConfigMaps(app).Create(ctx, kept, metav1.CreateOptions{}); err != nil {
			return tm, err
		}
		defer func() {
			_, _ = t.Client.CoreV1().ConfigMaps(app).Patch(context.Background(), "settings", "application/merge-patch+json", unlabel, metav1.PatchOptions{})
		}()
		if err := parallel(ctx, configs, func(ctx context.Context, name string) error {
			_, err := t.Client.CoreV1().ConfigMaps(app).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return tm, err
		}
		for _, w := range []struct{ ns, name string }{{app, "worker"}, {app, "web"}, {retired, "api"}} {
			if _, err := t.Client.CoreV1().Services(w.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: w.name},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": w.name}, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
				return tm, err
			}
			d := appDeployment(w.name, replicas, time.Second)
			if err := t.createApp(ctx, w.ns, d, t.generatedBudget(d)); err != nil {
				return tm, err
			}
		}
		refusals, err := t.watchRefusals(ctx, []string{app, retired})
		if err != nil {
			return tm, err
		}

		start := time.Now()
		pruned := configs[:n/2]
		cms := t.Client.CoreV1().ConfigMaps(app)
		err = parallel(ctx, pruned, func(ctx context.Context, name string) error {
			return cms.Delete(ctx, name, metav1.DeleteOptions{})
		})
		if err == nil {
			err = t.Client.CoreV1().Services(app).Delete(ctx, "worker", metav1.DeleteOptions{})
		}
		if err == nil {
			err = t.Client.AppsV1().Deployments(app).Delete(ctx, "worker", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		}
		if err == nil {
			err = t.Client.CoreV1().Namespaces().Delete(ctx, retired, metav1.DeleteOptions{})
		}
		if err != nil {
			// A refused prune is reported, not a failure of the drill.
			tm.Took = time.Since(start)
			return tm, refusals.settle(ctx, &tm, err, nil)
		}
		err = poll(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
			if _, err := t.Client.CoreV1().Namespaces().Get(ctx, retired, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
			if _, err := t.Client.AppsV1().Deployments(app).Get(ctx, "worker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
			list, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			// What stays: the other half, "settings", kube-root-ca.crt.
			return len(list.Items) == n-len(pruned)+2, nil
		})
		tm.Took, tm.Done = time.Since(start), err == nil
		if err != nil && !wait.Interrupted(err) {
			return tm, err
		}
		return tm, refusals.settle(ctx, &tm, nil, nil)
	},
}

// crdRemoval: CRDs a chart installed, and no custom resource of them left,
// are removed. Protected, the platform team's policy makes every CRD a
// Helm chart installs Cascading: these have nothing left to cascade to.
var crdRemoval = Operation{
	Name: "crd-removal",
	What: "three CRDs a Helm chart installed, with no custom resource left, are deleted; protected: a ProtectionPolicy makes Helm's CRDs Cascading",
	Run: func(ctx context.Context, t Target) (Timing, error) {
		var tm Timing
		helm := map[string]string{"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": t.Prefix + "-tools"}
		var names []string
		crds := t.Ext.ApiextensionsV1().CustomResourceDefinitions()
		created := time.Now()
		for i := range 3 {
			c := crd(fmt.Sprintf("%swidgets%d", t.Prefix, i), fmt.Sprintf("Widget%d", i), OperationsGroup, helm)
			if _, err := t.createCRD(ctx, c); err != nil {
				return tm, err
			}
			names = append(names, c.Name)
			defer t.cleanupCRD(c.Name)
		}
		// A CRD is removed long after it was installed. Right after, Rampart
		// refuses its delete for a moment (503, "rampart is still loading
		// its view of the cluster") until it watches the CRD's custom
		// resources: wait for that as a dry run shows it, and say how long.
		if err := poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			for _, name := range names {
				if err := crds.Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return tm, fmt.Errorf("a dry run of the CRDs' delete never passed: %w", err)
		}
		tm.Measured = map[string]float64{"deletable_after_create_s": seconds(time.Since(created))}
		var objects []string
		for _, name := range names {
			objects = append(objects, "customresourcedefinitions/"+name)
		}
		refusals, err := t.watchRefusals(ctx, nil, objects...)
		if err != nil {
			return tm, err
		}
		start := time.Now()
		for _, name := range names {
			if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				tm.Took = time.Since(start)
				return tm, refusals.settle(ctx, &tm, err, nil)
			}
		}
		err = poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
			for _, name := range names {
				if gone, _ := t.crdGone(name)(ctx); !gone {
					return false, nil
				}
			}
			return true, nil
		})
		tm.Took, tm.Done = time.Since(start), err == nil
		if err != nil && !wait.Interrupted(err) {
			return tm, err
		}
		return tm, refusals.settle(ctx, &tm, nil, nil)
	},
}
