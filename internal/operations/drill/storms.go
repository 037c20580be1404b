package drill

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var flowControlsGVR = windowsGVR.GroupVersion().WithResource("deletionflowcontrols")

// runawayController: a buggy controller (or script) deletes every pod of
// the cluster as fast as it can (ByteDance report). Protected by a
// DeletionFlowControl, at most its limit goes, then the breaker holds.
var runawayController = Drill{
	Name:     "runaway-controller",
	Incident: "a buggy controller deletes every pod of a 1,000-pod cluster as fast as it can (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		ns := t.Prefix + "-fleet"
		n := max(1000/t.Scale, 10)
		const limit = 50
		loss := Loss{Total: n, Unit: "pods deleted"}
		if err := t.namespace(ctx, ns, nil); err != nil {
			return loss, err
		}
		defer t.cleanupNamespace(ns)
		if t.Protected {
			loss.Bound = limit
			stop, err := t.flowControl(ctx, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s-pods}
spec:
  resources: [{apiGroups: [""], resources: [pods]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  limits: [{count: %d, window: 10m}]
  breaker: Manual`, t.Prefix, ns, limit))
			if err != nil {
				return loss, err
			}
			defer stop()
		}
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("worker-%04d", i)
		}
		if err := parallel(ctx, names, func(ctx context.Context, name string) error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "fleet"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
			_, err := t.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		}); err != nil {
			return loss, err
		}
		var err error
		loss.Lost, loss.Denied, err = storm(ctx, names, func(ctx context.Context, name string) error {
			return t.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
		return loss, err
	},
}

// nodeOfflining: in a meta-cluster, a controller acting on a bad input
// deletes node after node; 30,000 nodes were marked for deletion in 30
// minutes (ByteDance report).
var nodeOfflining = Drill{
	Name:     "node-offlining",
	Incident: "nodes are deleted in a storm by a controller acting on bad input; 30,000 were marked for deletion in 30 minutes (ByteDance report)",
	Run: func(ctx context.Context, t Target) (Loss, error) {
		n := max(200/t.Scale, 10)
		const limit = 20
		selector := "rampart.io/drill-nodes=" + t.Prefix
		loss := Loss{Total: n, Unit: "nodes deleted"}
		if t.Protected {
			loss.Bound = limit
			stop, err := t.flowControl(ctx, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s-nodes}
spec:
  resources: [{apiGroups: [""], resources: [nodes]}]
  objectSelector: {matchLabels: {rampart.io/drill-nodes: %s}}
  limits: [{count: %d, window: 10m}]
  breaker: Manual`, t.Prefix, t.Prefix, limit))
			if err != nil {
				return loss, err
			}
			defer stop()
		}
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("%s-node-%04d", t.Prefix, i)
		}
		defer func() {
			_ = t.Client.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector})
		}()
		if err := parallel(ctx, names, func(ctx context.Context, name string) error {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rampart.io/drill-nodes": t.Prefix}}}
			_, err := t.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			return err
		}); err != nil {
			return loss, err
		}
		var err error
		loss.Lost, loss.Denied, err = storm(ctx, names, func(ctx context.Context, name string) error {
			return t.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		})
		if t.Protected {
			// Lift the breaker so that the cleanup can delete the rest.
			_ = t.resetFlowControl(ctx, t.Prefix+"-nodes")
		}
		return loss, err
	},
}

// storm deletes every name as fast as it can and returns how many deletes
// went through and one denial's text.
func storm(ctx context.Context, names []string, del func(context.Context, string) error) (int, string, error) {
	var deleted atomic.Int32
	var denied atomic.Value
	err := parallel(ctx, names, func(ctx context.Context, name string) error {
		err := del(ctx, name)
		switch {
		case err == nil:
			deleted.Add(1)
		case apierrors.IsForbidden(err):
			denied.Store(err.Error())
		default:
			return err
		}
		return nil
	})
	d, _ := denied.Load().(string)
	return int(deleted.Load()), d, err
}

// parallel runs f for every name with 32 requests in flight, as a runaway
// client would, and returns the first error.
func parallel(ctx context.Context, names []string, f func(context.Context, string) error) error {
	work := make(chan string)
	var first atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for n := range work {
				if err := f(ctx, n); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// flowControl creates a DeletionFlowControl, waits until the manager has
// registered its webhook (a dry run cannot show enforcement: it is judged
// and admitted either way), and returns how to remove it.
func (t Target) flowControl(ctx context.Context, manifest string) (func(), error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		return nil, err
	}
	if _, err := t.Dynamic.Resource(flowControlsGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	name := u.GetName()
	stop := func() {
		_ = t.Dynamic.Resource(flowControlsGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	err := poll(ctx, settle, func(ctx context.Context) (bool, error) {
		cfg, err := t.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range cfg.Webhooks {
			if strings.HasSuffix(w.Name, name+".flowcontrol.rampart.io") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("flow control %s never registered: %w", name, err)
	}
	return stop, nil
}

func (t Target) resetFlowControl(ctx context.Context, name string) error {
	u, err := t.Dynamic.Resource(flowControlsGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	_ = unstructured.SetNestedField(u.Object, map[string]any{"state": "Closed"}, "status", "breaker")
	unstructured.RemoveNestedField(u.Object, "status", "buckets")
	_, err = t.Dynamic.Resource(flowControlsGVR).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}
