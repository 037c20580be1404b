package drill

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
)

// OperationsGroup is the API group of the CRDs the everyday operations
// create and remove; the manager lists its custom resources, as a user
// lists the groups whose CRDs Rampart protects.
const OperationsGroup = "tools.drill.rampart.io"

// OperationsCluster are the options of a local cluster for the everyday
// operations, protected or not. Where the local cluster's defaults differ
// from the chart's, they are the chart's, since that is what users run:
// two manager replicas, the horizontal-pod-autoscaler exempt from
// rampart.io/explicit-replicas, and the webhook configurations owned by the
// ClusterRole rampart-manager, so that uninstalling Rampart removes them.
func OperationsCluster(protected bool) localcluster.Options {
	o := localcluster.Options{
		Unprotected: !protected,
		// Pools of three for node-dies (and its spare) and drain, which
		// run at once, and room.
		Nodes:                8,
		CustomResourceGroups: append([]string{OperationsGroup}, CustomResourceGroups...),
	}
	if protected {
		o.Managers = 2
		o.ManagerArgs = []string{
			"--replicas-exempt-service-accounts=kube-system:horizontal-pod-autoscaler",
			"--webhook-owner-cluster-role=rampart-manager",
		}
	}
	return o
}

// operationsLabel marks the namespaces of the everyday operations; the
// protected side's flow control on pod deletes selects them, as a
// platform team's selects its applications' namespaces.
const operationsLabel = "rampart.io/drill-operations"

// keyObjects applies, on the protected cluster, what its users protect
// apart from the operations' own objects, and returns how to remove it: a
// key namespace (Cascading) with a Deployment labelled explicit-replicas
// under a generated budget; a ProtectionPolicy making every CRD a Helm
// chart installs Cascading; and a DeletionFlowControl on pod deletes in the
// applications' namespaces, its limit above their everyday churn.
func (t Target) keyObjects(ctx context.Context) (func(), error) {
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	ns := t.Prefix + "-key"
	if err := t.namespace(ctx, ns, t.protection(v1alpha1.ProtectionCascading)); err != nil {
		return nil, err
	}
	undo = append(undo, func() { t.cleanupNamespace(ns) })
	ledger := deployment("ledger", 3, map[string]string{v1alpha1.LabelExplicitReplicas: "true"})
	ledger.Annotations = map[string]string{v1alpha1.AnnotationGeneratePUB: "true"}
	if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, ledger, metav1.CreateOptions{}); err != nil {
		undoAll()
		return nil, err
	}
	stop, err := t.protectChartCRDs(ctx)
	if err != nil {
		undoAll()
		return nil, err
	}
	undo = append(undo, stop)
	stop, err = t.flowControl(ctx, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s-app-pods}
spec:
  resources: [{apiGroups: [""], resources: [pods]}]
  namespaceSelector: {matchLabels: {%s: %s}}
  limits: [{count: 5000, window: 10m}]
  breaker: Manual`, t.Prefix, operationsLabel, t.Prefix))
	if err != nil {
		undoAll()
		return nil, err
	}
	undo = append(undo, stop)
	if err := t.waitReady(ctx, ns, "app=ledger", 3); err != nil {
		undoAll()
		return nil, err
	}
	return undoAll, nil
}

// opsNamespace creates an operation's namespace, in the flow control's
// selector.
func (t Target) opsNamespace(ctx context.Context, name string) error {
	return t.namespace(ctx, name, map[string]string{operationsLabel: t.Prefix})
}

// appDeployment is an application's Deployment whose pods take readyAfter
// to start (kwok's pod-ready delay), as replacements of a real one do.
func appDeployment(name string, replicas int32, readyAfter time.Duration) *appsv1.Deployment {
	d := deployment(name, replicas, nil)
	d.Spec.Template.Annotations = map[string]string{localcluster.PodReadyDelayAnnotation: readyAfter.String()}
	return d
}

// generatedBudget asks, on the protected side, for the budget Rampart
// generates from the rollout strategy (25%), as a user annotates a key
// workload; it returns how many disruptions that budget allows when every
// pod is available (0 on the unprotected side).
func (t Target) generatedBudget(d *appsv1.Deployment) int64 {
	if !t.Protected {
		return 0
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[v1alpha1.AnnotationGeneratePUB] = "true"
	n, _ := intstr.GetScaledValueFromIntOrPercent(ptr.To(intstr.FromString("25%")), int(*d.Spec.Replicas), true)
	return int64(n)
}

// createApp creates d in ns and waits until its pods are Ready and, when
// it asked for a generated budget (see generatedBudget), until that
// budget allows what it should.
func (t Target) createApp(ctx context.Context, ns string, d *appsv1.Deployment, budgetAllows int64) error {
	if _, err := t.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := t.waitReady(ctx, ns, "app="+d.Name, int(*d.Spec.Replicas)); err != nil {
		return err
	}
	if budgetAllows > 0 {
		return t.waitBudget(ctx, ns, d.Name, budgetAllows)
	}
	return nil
}

// rolledOut says whether a Deployment has every replica updated and
// available, and no other.
func (t Target) rolledOut(ctx context.Context, ns, name string) (bool, *appsv1.Deployment, error) {
	d, err := t.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, nil, err
	}
	want := *d.Spec.Replicas
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want, d, nil
}
