package nodeguard_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/servers/nodeguard"
)

// TestContainersRunningCondition: the guard vouches only for the pods the
// saved-pods policy covers, writes True once a regular container runs and
// False as soon as none does, and writes nothing when the pod already
// says so or never ran.
func TestContainersRunningCondition(t *testing.T) {
	now := time.Unix(1700000000, 0)
	pod := func(f func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gold-0", Labels: map[string]string{v1alpha1.LabelExplicitDeletion: "true"}},
			Spec:   corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if f != nil {
			f(p)
		}
		return p
	}
	with := func(s corev1.ConditionStatus) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: v1alpha1.ConditionContainersRunning, Status: s}}
		}
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		running bool
		write   corev1.ConditionStatus // "" no write
	}{
		{"running, no condition yet", pod(nil), true, corev1.ConditionTrue},
		{"never ran", pod(nil), false, ""},
		{"running, already True", pod(with(corev1.ConditionTrue)), true, ""},
		{"stopped", pod(with(corev1.ConditionTrue)), false, corev1.ConditionFalse},
		{"stopped, already False", pod(with(corev1.ConditionFalse)), false, ""},
		{"running again", pod(with(corev1.ConditionFalse)), true, corev1.ConditionTrue},
		{"not labelled", pod(func(p *corev1.Pod) { p.Labels = nil }), true, ""},
		{"deleted", pod(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }), true, ""},
		{"restartPolicy Never", pod(func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }), true, ""},
		{"restartPolicy unset", pod(func(p *corev1.Pod) { p.Spec.RestartPolicy = "" }), true, corev1.ConditionTrue},
		{"already Failed", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), true, ""},
	} {
		c, write := nodeguard.ContainersRunningCondition(tc.pod, tc.running, now)
		if write != (tc.write != "") || write && c.Status != tc.write {
			t.Errorf("%s: write=%v %s, want %q", tc.name, write, c.Status, tc.write)
		}
		if c.Type != v1alpha1.ConditionContainersRunning || !c.LastTransitionTime.Equal(&metav1.Time{Time: now}) {
			t.Errorf("%s: condition %+v", tc.name, c)
		}
	}
}
