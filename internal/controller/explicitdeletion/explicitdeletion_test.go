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
	"github.com/rampart-io/rampart/internal/controller/explicitdeletion"
	"github.com/rampart-io/rampart/internal/localcluster"
	"github.com/rampart-io/rampart/internal/localcluster/clustertest"
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
	for _, tt := range []struct {
		name     string
		pod      *corev1.Pod
		chain    []explicitdeletion.Workload
		policies []v1alpha1.ProtectionPolicy
		want     bool
	}{
		{"Deployment labelled, through its ReplicaSet", running(), []explicitdeletion.Workload{rs, labelledDep}, nil, true},
		{"nothing opts in", running(), []explicitdeletion.Workload{rs, dep}, nil, false},
		{"pending", running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), []explicitdeletion.Workload{rs, labelledDep}, nil, false},
		{"being deleted", running(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), []explicitdeletion.Workload{rs, labelledDep}, nil, false},
		{"already labelled", running(func(p *corev1.Pod) { p.Labels = optIn }), []explicitdeletion.Workload{rs, labelledDep}, nil, false},
		{"a bare pod", running(), nil, nil, false},
		{"policy covers the Deployment", running(), []explicitdeletion.Workload{rs, dep}, []v1alpha1.ProtectionPolicy{policy("", true, "deployments")}, true},
		{"policy in Warn mode", running(), []explicitdeletion.Workload{rs, dep}, []v1alpha1.ProtectionPolicy{policy(v1alpha1.ModeWarn, true, "deployments")}, false},
		{"policy without explicitDeletion", running(), []explicitdeletion.Workload{rs, dep}, []v1alpha1.ProtectionPolicy{policy("", false, "deployments")}, false},
		{"policy of other resources", running(), []explicitdeletion.Workload{rs, dep}, []v1alpha1.ProtectionPolicy{policy("", true, "statefulsets")}, false},
	} {
		if got, why := explicitdeletion.Decide(tt.pod, tt.chain, tt.policies, nil); got != tt.want {
			t.Errorf("%s: Decide = %v (%s), want %v", tt.name, got, why, tt.want)
		}
	}
}

// TestRunningPodsOfOptedInWorkloadsAreLabelled: against the real control
// plane (kwok nodes run the pods), the manager labels the running pods of
// a Deployment labelled rampart.io/explicit-deletion=true, of one labelled
// later, and of a StatefulSet a ProtectionPolicy with explicitDeletion
// covers; an unlabelled Deployment's pods stay as they are.
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
}
