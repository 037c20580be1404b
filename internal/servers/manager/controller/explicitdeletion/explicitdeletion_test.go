package explicitdeletion_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/servers/manager/controller/explicitdeletion"
)

func TestMain(m *testing.M) { clustertest.Main(m, localcluster.Options{}) }

var deployments = schema.GroupResource{Group: "apps", Resource: "deployments"}

func TestDecide(t *testing.T) {
	running := func(o ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, f := range o {
			f(p)
		}
		return p
	}
	optIn := map[string]string{v1alpha1.LabelExplicitDeletion: "true"}
	rs := explicitdeletion.Workload{Kind: "ReplicaSet", Name: "web-7d", Resource: schema.GroupResource{Group: "apps", Resource: "replicasets"}}
	dep := explicitdeletion.Workload{Kind: "Deployment", Name: "web", Resource: deployments, Labels: map[string]string{"app": "web"}}
	labelledDep := dep
	labelledDep.Labels = optIn
	policy := func(mode v1alpha1.PolicyMode, on bool, res ...string) v1alpha1.ProtectionPolicy {
		return v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "key"}, Spec: v1alpha1.ProtectionPolicySpec{
			Resources: []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: res}}, ExplicitDeletion: on, Mode: mode,
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	}
	byManager := func(p *corev1.Pod) {
		p.Labels = optIn
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "rampart-manager", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:rampart.io/explicit-deletion":{}}}}`)}}}
	}
	byHand := func(p *corev1.Pod) {
		p.Labels = optIn
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-label", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:rampart.io/explicit-deletion":{}}}}`)}}}
	}
	L, U, leave := explicitdeletion.Label, explicitdeletion.Unlabel, explicitdeletion.Leave
	for _, tt := range []struct {
		name     string
		pod      *corev1.Pod
		chain    []explicitdeletion.Workload
		complete bool
		policies []v1alpha1.ProtectionPolicy
		want     explicitdeletion.Action
	}{
		{"Deployment labelled, through its ReplicaSet", running(), []explicitdeletion.Workload{rs, labelledDep}, true, nil, L},
		{"nothing opts in", running(), []explicitdeletion.Workload{rs, dep}, true, nil, leave},
		{"pending", running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), []explicitdeletion.Workload{rs, labelledDep}, true, nil, leave},
		{"being deleted", running(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), []explicitdeletion.Workload{rs, labelledDep}, true, nil, leave},
		{"already labelled", running(byManager), []explicitdeletion.Workload{rs, labelledDep}, true, nil, leave},
		{"a bare pod", running(), nil, true, nil, leave},
		{"policy covers the Deployment", running(), []explicitdeletion.Workload{rs, dep}, true, []v1alpha1.ProtectionPolicy{policy("", true, "deployments")}, L},
		{"policy in Warn mode", running(), []explicitdeletion.Workload{rs, dep}, true, []v1alpha1.ProtectionPolicy{policy(v1alpha1.ModeWarn, true, "deployments")}, leave},
		{"policy without explicitDeletion", running(), []explicitdeletion.Workload{rs, dep}, true, []v1alpha1.ProtectionPolicy{policy("", false, "deployments")}, leave},
		{"policy of other resources", running(), []explicitdeletion.Workload{rs, dep}, true, []v1alpha1.ProtectionPolicy{policy("", true, "statefulsets")}, leave},
		// Opting out.
		{"the manager's label, nothing opts in any more", running(byManager), []explicitdeletion.Workload{rs, dep}, true, nil, U},
		{"the manager's label, the policy set to Warn", running(byManager), []explicitdeletion.Workload{rs, dep}, true, []v1alpha1.ProtectionPolicy{policy(v1alpha1.ModeWarn, true, "deployments")}, U},
		{"the manager's label on a pod that finished", running(byManager, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), []explicitdeletion.Workload{rs, dep}, true, nil, U},
		{"the manager's label, the Deployment not in view", running(byManager), []explicitdeletion.Workload{rs}, false, nil, leave},
		{"a label put on by hand", running(byHand), []explicitdeletion.Workload{rs, dep}, true, nil, leave},
		{"the manager's label, being deleted", running(byManager, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), []explicitdeletion.Workload{rs, dep}, true, nil, leave},
	} {
		if got, why := explicitdeletion.Decide(tt.pod, tt.chain, tt.complete, tt.policies, nil); got != tt.want {
			t.Errorf("%s: Decide = %v (%s), want %v", tt.name, got, why, tt.want)
		}
	}
}

// TestRunningPodsOfOptedInWorkloadsAreLabelled: against the real control
// plane (kwok nodes run the pods), the manager labels the running pods of
// a Deployment labelled rampart.io/explicit-deletion=true, of one labelled
// later, and of a StatefulSet and a ReplicationController ProtectionPolicies
// with explicitDeletion cover; an unlabelled Deployment's pods stay as they
// are.
func TestRunningPodsOfOptedInWorkloadsAreLabelled(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = v1alpha1.AddToScheme(c.Scheme())
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/" + app + ":1"}}}}
	}
	deployment := func(name string, labels map[string]string, replicas int32) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: template(name)}}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	optIn := map[string]string{v1alpha1.LabelExplicitDeletion: "true"}

	// A policy must cover a workload kind to ask for explicit deletion.
	bad := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns + "-bad"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}, ExplicitDeletion: true}}
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "explicitDeletion labels the running pods of the workloads the policy covers") {
		t.Fatalf("a policy with explicitDeletion over configmaps: %v, want the CRD's validation error", err)
	}
	pol := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns + "-db"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}},
		ExplicitDeletion:  true}}
	if err := c.Create(ctx, pol); err != nil {
		t.Fatalf("a policy with only explicitDeletion: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pol) })

	// ReplicationControllers are workloads too: a policy over them (core
	// group) is accepted and labels their pods.
	legacy := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: ns + "-legacy"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"replicationcontrollers"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		ExplicitDeletion:  true}}
	if err := c.Create(ctx, legacy); err != nil {
		t.Fatalf("a policy with explicitDeletion over replicationcontrollers: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), legacy) })
	rcTemplate := template("rc")
	rc := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rc"}, Spec: corev1.ReplicationControllerSpec{
		Replicas: ptr.To(int32(1)), Selector: map[string]string{"app": "rc"}, Template: &rcTemplate}}
	if err := c.Create(ctx, rc); err != nil {
		t.Fatal(err)
	}

	deployment("web", optIn, 2)
	deployment("plain", nil, 1)
	deployment("later", nil, 1)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: map[string]string{"tier": "db"}}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: template("db")}}
	if err := c.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	env.WaitPodsRunning(t, ns, "app=later", 1, time.Minute)
	if err := c.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+v1alpha1.LabelExplicitDeletion+`":"true"}}}`))); err != nil {
		t.Fatal(err)
	}

	labelled := func(app string, n int) {
		t.Helper()
		start := time.Now()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": app, v1alpha1.LabelExplicitDeletion: "true"}); err != nil {
				return false, nil
			}
			last = ""
			for _, p := range pods.Items {
				last += p.Name + " " + string(p.Status.Phase) + "; "
			}
			return len(pods.Items) == n, nil
		})
		if err != nil {
			t.Fatalf("waiting for %d running pods app=%s labelled %s=true: %v (labelled: %s)", n, app, v1alpha1.LabelExplicitDeletion, err, last)
		}
		t.Logf("app=%s: %d pods labelled %s after the wait began", app, n, time.Since(start).Round(time.Millisecond))
	}
	// The policy is Ready like any other (its namespaceSelector has a
	// webhook of its own; without one it would need none).
	var ready string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.ProtectionPolicy{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pol), got); err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == "Ready" {
				ready = string(cond.Status) + ": " + cond.Message
			}
		}
		return strings.HasPrefix(ready, "True: "), nil
	}); err != nil {
		t.Errorf("the explicitDeletion-only policy's Ready condition: %q, want True", ready)
	}
	labelled("web", 2)
	labelled("db", 2)
	labelled("later", 1)
	labelled("rc", 1)
	env.WaitPodsRunning(t, ns, "app=plain", 1, time.Minute)
	var plain corev1.PodList
	if err := c.List(ctx, &plain, client.InNamespace(ns), client.MatchingLabels{"app": "plain"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range plain.Items {
		if p.Labels[v1alpha1.LabelExplicitDeletion] != "" {
			t.Errorf("pod %s of an unlabelled Deployment was labelled", p.Name)
		}
	}

	// Opting out: the Deployment "later" loses its label, and its pod the
	// label the manager gave it. A label someone put on by hand stays.
	setLabel := func(obj client.Object, value string, owner string) {
		t.Helper()
		v := `"true"`
		if value == "" {
			v = "null"
		}
		if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+v1alpha1.LabelExplicitDeletion+`":`+v+`}}}`)), client.FieldOwner(owner)); err != nil {
			t.Fatal(err)
		}
	}
	byHand := &plain.Items[0]
	setLabel(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: byHand.Name}}, "true", "kubectl-label")
	setLabel(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}}, "", "kubectl-label")
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "later", v1alpha1.LabelExplicitDeletion: "true"}); err != nil {
			return false, nil
		}
		return len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the pod of a Deployment that opted out is still labelled %s=true", v1alpha1.LabelExplicitDeletion)
	}
	t.Logf("app=later: label taken back %s after the Deployment lost it", time.Since(start).Round(time.Millisecond))
	got := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(byHand), got); err != nil || got.Labels[v1alpha1.LabelExplicitDeletion] != "true" {
		t.Fatalf("the label put on pod %s by hand was taken away: %v %v", byHand.Name, got.Labels, err)
	}
	labelled("web", 2) // the others keep theirs
}
