package clusterview

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

func addNamespace(t *testing.T, v *Views, name string, labels map[string]string) {
	t.Helper()
	ns := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := v.informer(namespaces).GetIndexer().Add(ns); err != nil {
		t.Fatal(err)
	}
}

func deployment(ns, name string, replicas *int32, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: replicas}}
}

// TestScaleTargets: the workloads whose scale subresource a rule guards,
// by label or by a policy's selectors over the workload and its namespace.
func TestScaleTargets(t *testing.T) {
	v := newTestView(t)
	addNamespace(t, v, "prod", map[string]string{"tier": "critical", corev1.LabelMetadataName: "prod"})
	addNamespace(t, v, "dev", map[string]string{corev1.LabelMetadataName: "dev"})
	add(t, v,
		deployment("dev", "labelled", nil, map[string]string{v1alpha1.LabelExplicitReplicas: "true"}),
		deployment("prod", "web", nil, nil),
		deployment("dev", "web", nil, nil),
		deployment("unseen", "web", nil, nil),
	)
	rules := []v1alpha1.ResourceRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}}
	policies := []v1alpha1.ProtectionPolicy{
		{Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, ExplicitReplicas: &v1alpha1.ExplicitReplicas{},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}}}},
		// A namespace no cache has seen yet is matched by its name label.
		{Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, ExplicitReplicas: &v1alpha1.ExplicitReplicas{},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "unseen"}}}},
		// Protects deletes, guards no replicas.
		{Spec: v1alpha1.ProtectionPolicySpec{Resources: rules, Protection: v1alpha1.ProtectionAlways}},
	}
	want := []string{"apps/deployments/dev/labelled", "apps/deployments/prod/web", "apps/deployments/unseen/web"}
	if got := v.ScaleTargets.Targets(policies); !slices.Equal(got, want) {
		t.Errorf("Targets = %v, want %v", got, want)
	}
	if got := v.ScaleTargets.Targets(nil); !slices.Equal(got, want[:1]) {
		t.Errorf("Targets without policies = %v, want %v", got, want[:1])
	}
	if l, _, ok := v.ScaleTargets.WorkloadLabels(deployments, "dev", "labelled"); !ok || l[v1alpha1.LabelExplicitReplicas] != "true" {
		t.Errorf("WorkloadLabels(dev/labelled) = %v, %v", l, ok)
	}
}

// TestBudgetsControllerReplicas follows a pod's controller to the top
// workload, reading each kind from its own informer.
func TestBudgetsControllerReplicas(t *testing.T) {
	v := newTestView(t)
	add(t, v,
		deployment("shop", "web", ptr.To[int32](5), nil),
		deployment("shop", "default", nil, nil),
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abc",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid", Controller: ptr.To(true)}}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](5)}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "bare"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2)}},
		// A training job of 8 workers; an indexed job with 2 of its 5
		// completions left; a job with no parallelism set; one done.
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "train"},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](8), Completions: ptr.To[int32](8)}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "indexed"},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](5)}, Status: batchv1.JobStatus{Succeeded: 3}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "one"}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "done"},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](2)}, Status: batchv1.JobStatus{Succeeded: 2}},
		// Suspended (Kueue preempting it) or failed: the Job controller
		// deletes the pods, which a budget must let go.
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "suspended"},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Suspend: ptr.To(true)}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "deadline"},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4)}, Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded"}}}},
	)
	for _, tt := range []struct {
		controller string
		top        string
		replicas   int32
		ok         bool
	}{
		{"ReplicaSet/web-abc", "Deployment/web", 5, true},
		{"ReplicaSet/bare", "ReplicaSet/bare", 2, true},
		{"Deployment/default", "Deployment/default", 1, true},
		{"StatefulSet/db", "StatefulSet/db", 0, false},
		{"Job/train", "Job/train", 8, true},
		{"Job/indexed", "Job/indexed", 2, true},
		{"Job/one", "Job/one", 1, true},
		{"Job/done", "Job/done", 0, true},
		{"Job/suspended", "Job/suspended", 0, true},
		{"Job/deadline", "Job/deadline", 0, true},
		{"Job/unseen", "Job/unseen", 0, false},
		{"Widget/w", "Widget/w", 0, false},
	} {
		top, n, ok := v.Budgets.ControllerReplicas("shop", tt.controller)
		if top != tt.top || n != tt.replicas || ok != tt.ok {
			t.Errorf("ControllerReplicas(%s) = %s %d %v, want %s %d %v", tt.controller, top, n, ok, tt.top, tt.replicas, tt.ok)
		}
	}
}

// TestBudgetsSurplus: the pods a scale-down leaves over are surplus; a
// rollout's, a replacement's and an unseen owner's are not.
func TestBudgetsSurplus(t *testing.T) {
	v := newTestView(t)
	rev := func(n string) map[string]string { return map[string]string{"deployment.kubernetes.io/revision": n} }
	owned := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(name), Controller: ptr.To(true)}}
	}
	rs := func(name, owner, revision string, want, counted int32) *appsv1.ReplicaSet {
		r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name), Annotations: rev(revision)},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(want)}, Status: appsv1.ReplicaSetStatus{Replicas: counted}}
		if owner != "" {
			r.OwnerReferences = owned("Deployment", owner)
		}
		return r
	}
	d := deployment("shop", "web", ptr.To[int32](2), nil)
	d.UID, d.Annotations = "web", rev("3")
	add(t, v, d,
		rs("web-new", "web", "3", 2, 10), // an autoscaler's scale-down
		rs("web-old", "web", "2", 2, 10), // a rollout scaling the old one down
		rs("web-steady", "web", "3", 5, 5),
		rs("bare", "", "", 1, 3),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", UID: "db"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}},
	)
	ref := func(kind, name string) metav1.OwnerReference { return owned(kind, name)[0] }
	for _, tt := range []struct {
		owner metav1.OwnerReference
		pod   string
		want  bool
	}{
		{ref("ReplicaSet", "web-new"), "web-new-x", true},
		{ref("ReplicaSet", "web-old"), "web-old-x", false},
		{ref("ReplicaSet", "web-steady"), "web-steady-x", false},
		{ref("ReplicaSet", "bare"), "bare-x", true},
		{metav1.OwnerReference{Kind: "ReplicaSet", Name: "web-new", UID: "other"}, "web-new-x", false},
		{ref("StatefulSet", "db"), "db-3", true},
		{ref("StatefulSet", "db"), "db-2", false},
		{ref("StatefulSet", "db"), "dbx-7", false},
		{ref("ReplicaSet", "unseen"), "unseen-x", false},
	} {
		if got := v.Budgets.Surplus("shop", tt.owner, tt.pod); got != tt.want {
			t.Errorf("Surplus(%s/%s, %s) = %v, want %v", tt.owner.Kind, tt.owner.Name, tt.pod, got, tt.want)
		}
	}
}

// TestDeletionCountsPolicyProtectedObjects: a namespace DELETE counts the
// objects a policy protects as it counts labelled ones.
func TestDeletionCountsPolicyProtectedObjects(t *testing.T) {
	v := newTestView(t)
	addNamespace(t, v, "shop", map[string]string{corev1.LabelMetadataName: "shop"})
	add(t, v,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings", Labels: map[string]string{"keep": "yes"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "scratch"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "settings", Labels: map[string]string{"keep": "yes"}}},
	)
	v.Deletion.SetPolicies(func() []v1alpha1.ProtectionPolicy {
		return []v1alpha1.ProtectionPolicy{{Spec: v1alpha1.ProtectionPolicySpec{Protection: v1alpha1.ProtectionAlways,
			Resources:      []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"keep": "yes"}}}}}
	})
	got := v.Deletion.ProtectedObjects("shop")
	if got.Count != 1 || !slices.Equal(got.Examples, []string{"configmap/settings"}) {
		t.Errorf("ProtectedObjects(shop) = %d %v, want 1 [configmap/settings]", got.Count, got.Examples)
	}
}
