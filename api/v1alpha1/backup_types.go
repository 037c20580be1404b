package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupSpec says what to back up and when. Where is the manager's
// (--backup-store, the chart's manager.backup.store): a Backup names no
// store, so that the right to create one is not a way to write with the
// manager's credentials wherever its author likes.
//
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || (duration(self.retention) >= duration('1m') && duration(self.retention) <= duration('87600h'))",message="retention must be between 1m and 87600h (10 years)"
// +kubebuilder:validation:XValidation:rule="!has(self.etcdSnapshot) || (!has(self.namespaces) && !has(self.resources) && !has(self.excludeResources) && !has(self.labelSelector))",message="an etcdSnapshot Backup takes the whole of etcd: leave out namespaces, resources, excludeResources and labelSelector (for object backups too, make a second Backup)"
type BackupSpec struct {
	// Namespaces backed up; empty: all of them, and then the
	// cluster-scoped resources too.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`

	// Resources backed up, as resource, resource.group or kind (e.g.
	// deployments.apps, configmaps, Widget); empty: every resource the
	// API server lists (nodes, events and leases never).
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	Resources []string `json:"resources,omitempty"`

	// ExcludeResources are left out, in the same form.
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	// +optional
	ExcludeResources []string `json:"excludeResources,omitempty"`

	// LabelSelector backs up only the objects it selects (with the
	// Namespaces and CustomResourceDefinitions they need), as kubectl -l
	// takes it, e.g. tier=critical,app!=test.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`

	// Schedule is a five-field cron schedule in UTC (minute hour
	// day-of-month month day-of-week), or @hourly, @daily, @weekly,
	// @monthly, @every DURATION. Absent: one backup, made at once.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every [0-9hms.]+|[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4})$`
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// KeepLast is how many of this Backup's backups are kept; the oldest
	// go first.
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	KeepLast int32 `json:"keepLast,omitempty"`

	// Retention, when set, also deletes this Backup's backups older than
	// it, e.g. 720h (never the newest successful one).
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Retention string `json:"retention,omitempty"`

	// Suspend stops scheduled backups; those missed meanwhile are not
	// made up when it is lifted.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// EtcdSnapshot, when set, makes this Backup take etcd snapshots
	// (verified as rampart etcd snapshot save verifies them) instead of
	// object backups, on the same schedule and retention, into the same
	// store under etcd/NAME-YYYYMMDD-HHMMSS.db.
	// +optional
	EtcdSnapshot *EtcdSnapshotSource `json:"etcdSnapshot,omitempty"`
}

// EtcdSnapshotSource says how the manager reaches etcd. The endpoints are
// in the Secret with the certificate, not here: whoever may create a
// Backup cannot point the manager's etcd credentials elsewhere.
type EtcdSnapshotSource struct {
	// SecretName is a Secret in Rampart's namespace with the keys
	// endpoints (comma-separated https://HOST:2379 URLs), ca.crt, tls.crt
	// and tls.key (an etcd client certificate; the API server's
	// --etcd-certfile/--etcd-keyfile will do). The manager reads only the
	// Secrets its --etcd-snapshot-secrets names (the chart's
	// manager.backup.etcdSnapshot.secretNames, which grants get on those
	// alone).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	SecretName string `json:"secretName"`
}

// BackupRun is one backup made for a Backup.
type BackupRun struct {
	// Name is the backup's name in the store (rampart backup describe NAME).
	Name string `json:"name"`
	// Started and Finished bound the run.
	Started metav1.Time `json:"started"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Duration is Finished - Started, e.g. 1.2s.
	// +optional
	Duration string `json:"duration,omitempty"`
	// Objects and Resources count what it holds; Size is the archive's
	// bytes.
	// +optional
	Objects int64 `json:"objects,omitempty"`
	// +optional
	Resources int64 `json:"resources,omitempty"`
	// +optional
	Size int64 `json:"size,omitempty"`
	// Revision is an etcd snapshot's newest revision.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// SHA256 is an etcd snapshot's checksum, as the store records it.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Error says why it failed; empty when it succeeded.
	// +optional
	Error string `json:"error,omitempty"`
}

// BackupStatus is what the manager reports of a Backup.
type BackupStatus struct {
	// ObservedGeneration is the generation the conditions speak of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the spec is valid and the manager can back up:
	// a store is configured), Succeeded (the last run's outcome).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastScheduleTime is when the last run was due.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// NextScheduleTime is when the next run is due; absent without a
	// schedule or when suspended.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// LastRun is the last run, successful or not.
	// +optional
	LastRun *BackupRun `json:"lastRun,omitempty"`
	// LastSuccessfulRun is the last run that succeeded.
	// +optional
	LastSuccessfulRun *BackupRun `json:"lastSuccessfulRun,omitempty"`
	// ConsecutiveFailures counts the runs failed since the last success.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// Kept are the names of this Backup's backups in the store, oldest
	// first.
	// +optional
	// +listType=atomic
	Kept []string `json:"kept,omitempty"`
}

// Backup has the manager back up objects to its store, once or on a
// schedule, keeping the newest; `rampart backup restore NAME` restores
// one with a dry run first. It lives in Rampart's own namespace: the
// manager reads every object for it, so only who may create objects
// there may ask for one.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=rbk,categories=rampart
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40 && !self.metadata.name.contains('.')",message="a Backup's name is at most 40 characters, without dots: its backups are named NAME-YYYYMMDD-HHMMSS, a DNS label"
// +kubebuilder:printcolumn:name="Etcd",type=string,JSONPath=`.spec.etcdSnapshot.secretName`,priority=1
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last",type=string,JSONPath=`.status.lastRun.name`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
// +kubebuilder:printcolumn:name="Objects",type=integer,JSONPath=`.status.lastRun.objects`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextScheduleTime`
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BackupSpec   `json:"spec"`
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backup.
//
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Backup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Backup{}, &BackupList{})
}
