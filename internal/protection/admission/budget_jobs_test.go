package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// Do no harm: a budget over a Job's pods (maxUnavailable 0, so a user's
// delete is refused) never holds the Job controller's own deletes. A Job
// suspended, as Kueue does to preempt it, and a Job past its
// activeDeadlineSeconds lose their running pods at once, as without
// Rampart. (Refused, the deadline's deletes were retried for ever: the
// Job controller declares the Job failed only once its pods are gone.)
func TestBudgetLetsTheJobControllerRemoveItsPods(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	job := func(name string, deadline *int64) {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](3), Completions: ptr.To[int32](3), ActiveDeadlineSeconds: deadline,
			// Workers that run until stopped (kwok completes a Job's pods at
			// once otherwise).
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{localcluster.PodCompleteDelayAnnotation: "1h"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "train", Image: "train:1"}}, TerminationGracePeriodSeconds: ptr.To[int64](0)}}}}
		if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createBudget(t, env, ns, name, fmt.Sprintf(`{selector: {matchLabels: {batch.kubernetes.io/job-name: %s}}, maxUnavailable: 0}`, name))
	}
	job("preempted", nil)
	job("deadline", ptr.To[int64](20))
	for _, name := range []string{"preempted", "deadline"} {
		pods := env.WaitPodsRunning(t, ns, "batch.kubernetes.io/job-name="+name, 3, 2*time.Minute)
		waitBudget(t, env, ns, name, time.Minute, func(st v1alpha1.PodUnavailableBudgetStatus) bool {
			return st.TotalReplicas == 3 && st.CurrentAvailable == 3
		})
		// In force: a user's delete of a running pod is refused.
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); !apierrors.IsTooManyRequests(err) && !apierrors.IsForbidden(err) {
			t.Fatalf("Job %s: a user's delete of a running pod under maxUnavailable 0: %v, want it refused", name, err)
		}
	}
	// Kueue's preemption: suspend the Job.
	start := time.Now()
	if _, err := env.Client.BatchV1().Jobs(ns).Patch(ctx, "preempted", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"preempted", "deadline"} {
		// The deadline Job's 20 s run out meanwhile.
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
			if err != nil {
				return false, nil
			}
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			j, _ := env.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
			st := getBudget(t, env, ns, name).Status
			t.Logf("Job %s: conditions %+v; budget total %d, available %d, allowed %d", name, j.Status.Conditions, st.TotalReplicas, st.CurrentAvailable, st.UnavailableAllowed)
			t.Fatalf("Job %s: its pods still run %v after it was %s: the budget held the Job controller's deletes", name, time.Since(start).Round(time.Second),
				map[string]string{"preempted": "suspended", "deadline": "past its activeDeadlineSeconds"}[name])
		}
		t.Logf("Job %s: no pod running %v after the suspend", name, time.Since(start).Round(100*time.Millisecond))
	}
}
