package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// What rampart status says of a Backup: the last run and what the backup
// to restore holds, the next run, and LATE (past the alert's 10 minutes),
// FAILING and NOT READY flagged.
func TestBackupRowFlagsWhatNeedsALook(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	good := &v1alpha1.BackupRun{Name: "n-1", Started: *at(-2 * time.Hour), Objects: 2008, Size: 223334}
	for _, tt := range []struct {
		name string
		b    v1alpha1.Backup
		want string
	}{
		{name: "healthy", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Schedule: "@every 6h"},
			Status: v1alpha1.BackupStatus{LastRun: good, LastSuccessfulRun: good, NextScheduleTime: at(4 * time.Hour)}},
			want: "healthy|objects|@every 6h|120m ago|Succeeded|218.1 KiB|2008|in 4h|-"},
		{name: "failing", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Schedule: "0 2 * * *"},
			Status: v1alpha1.BackupStatus{LastRun: &v1alpha1.BackupRun{Started: *at(-time.Minute), Error: "listing gizmos: the server could not find the requested resource"},
				LastSuccessfulRun: good, ConsecutiveFailures: 3, NextScheduleTime: at(14 * time.Hour)}},
			want: "failing|objects|0 2 * * *|60s ago|Failed: listing gizmos: the server could not find the requested resource|218.1 KiB|2008|in 14h|FAILING (3 in a row)"},
		{name: "late", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Schedule: "@hourly"},
			Status: v1alpha1.BackupStatus{NextScheduleTime: at(-25 * time.Minute)}},
			want: "late|objects|@hourly|never|-|-|-|25m overdue|LATE"},
		{name: "due", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Schedule: "@hourly"},
			Status: v1alpha1.BackupStatus{NextScheduleTime: at(-5 * time.Second)}},
			want: "due|objects|@hourly|never|-|-|-|due now|-"},
		{name: "overdue", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Schedule: "@hourly"},
			Status: v1alpha1.BackupStatus{NextScheduleTime: at(-5 * time.Minute)}},
			want: "overdue|objects|@hourly|never|-|-|-|5m overdue|-"},
		{name: "etcd", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Schedule: "@hourly", EtcdSnapshot: &v1alpha1.EtcdSnapshotSource{SecretName: "kube-secrets"}},
			Status: v1alpha1.BackupStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "SecretNotAllowed", Message: "the manager reads only..."}}}},
			want: "etcd|etcd|@hourly|never|-|-|-|-|NOT READY (SecretNotAllowed): the manager reads only..."},
		{name: "etcd-ok", b: v1alpha1.Backup{Spec: v1alpha1.BackupSpec{Suspend: true, Schedule: "@hourly", EtcdSnapshot: &v1alpha1.EtcdSnapshotSource{SecretName: "etcd"}},
			Status: v1alpha1.BackupStatus{LastRun: good, LastSuccessfulRun: &v1alpha1.BackupRun{Size: 860192, Revision: 395}}},
			want: "etcd-ok|etcd|@hourly|120m ago|Succeeded|840.0 KiB|rev 395|suspended|-"},
	} {
		tt.b.Name = tt.name
		if got := strings.Join(backupRow(tt.b, now), "|"); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
