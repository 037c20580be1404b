package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionFlowControlSpec limits how many deletes of the resources it
// counts may happen per time window, cluster-wide, and trips a breaker
// when a limit is reached.
type DeletionFlowControlSpec struct {
	// Resources counted, e.g. pods, nodes, namespaces, custom resources.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Resources []ResourceRule `json:"resources"`

	// NamespaceSelector and ObjectSelector narrow what is counted.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// Limits apply together: a delete is admitted only while every one
	// has room, e.g. 100 per 10m, 500 per 1h, 5000 per 24h.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Limits []DeletionLimit `json:"limits"`

	// Exempt deletes are neither counted nor denied.
	// +optional
	Exempt FlowControlExemptions `json:"exempt,omitempty"`

	// Mode Enforce denies; DryRun counts and reports, and denies nothing.
	// +kubebuilder:default=Enforce
	// +optional
	Mode FlowControlMode `json:"mode,omitempty"`

	// Breaker says how a tripped breaker closes again: Manual (a person
	// runs `rampart flowcontrol reset NAME`) or Auto (as soon as every
	// limit has room again).
	// +kubebuilder:default=Manual
	// +optional
	Breaker BreakerReset `json:"breaker,omitempty"`

	// CountEvictions counts pod evictions (pods/eviction) as deletes.
	// +kubebuilder:default=true
	// +optional
	CountEvictions *bool `json:"countEvictions,omitempty"`
}

// DeletionLimit is at most Count deletes in any Window.
//
// +kubebuilder:validation:XValidation:rule="duration(self.window) >= duration('10s') && duration(self.window) <= duration('720h')",message="window must be between 10s and 720h"
type DeletionLimit struct {
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
	// Window is a duration such as 10m, 1h or 24h.
	Window string `json:"window"`
}

// FlowControlExemptions are deletes the flow control ignores.
type FlowControlExemptions struct {
	Subjects `json:",inline"`
	// ObjectSelector exempts the objects it selects.
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`
}

// FlowControlMode says whether a flow control denies.
// +kubebuilder:validation:Enum=Enforce;DryRun
type FlowControlMode string

// BreakerReset says how a breaker closes.
// +kubebuilder:validation:Enum=Manual;Auto
type BreakerReset string

// The modes and resets.
const (
	FlowEnforce   FlowControlMode = "Enforce"
	FlowDryRun    FlowControlMode = "DryRun"
	BreakerManual BreakerReset    = "Manual"
	BreakerAuto   BreakerReset    = "Auto"
)

// DeletionFlowControlStatus is the shared, durable state of the flow
// control: every replica of the manager counts here, with optimistic
// concurrency, so counts survive restarts and hold across replicas.
type DeletionFlowControlStatus struct {
	// Buckets count admitted deletes per limit: Buckets[i] for Limits[i].
	// +optional
	// +listType=atomic
	Buckets []LimitBuckets `json:"buckets,omitempty"`
	// Counts are the deletes counted in each limit's current window, as of
	// the last update.
	// +optional
	// +listType=atomic
	Counts []int32 `json:"counts,omitempty"`
	// Breaker is Closed or Open.
	// +optional
	Breaker BreakerStatus `json:"breaker,omitempty"`
	// RecentDenied are the latest requesters denied, newest first.
	// +optional
	// +listType=atomic
	RecentDenied []DeniedRequester `json:"recentDenied,omitempty"`
	// ObservedGeneration is the generation the Ready condition speaks of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (True once the flow control's webhook is registered:
	// it counts from then on) and BreakerOpen.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LimitBuckets are the counts of one limit in slots of Width seconds.
type LimitBuckets struct {
	// Width of each slot, in seconds.
	Width int64 `json:"width"`
	// Slots are the non-empty slots, oldest first.
	// +optional
	// +listType=atomic
	Slots []Slot `json:"slots,omitempty"`
}

// Slot is the number of deletes admitted from Start for one slot width.
type Slot struct {
	// Start in Unix seconds.
	Start int64 `json:"start"`
	Count int32 `json:"count"`
}

// BreakerStatus is the breaker's state.
type BreakerStatus struct {
	// +kubebuilder:validation:Enum=Closed;Open
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	TrippedAt *metav1.Time `json:"trippedAt,omitempty"`
	// Reason says which limit tripped it.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// DeniedRequester is a requester a flow control denied.
type DeniedRequester struct {
	User string      `json:"user"`
	Time metav1.Time `json:"time"`
	// Object is what it tried to delete.
	Object string `json:"object"`
}

// DeletionFlowControl rate-limits deletions cluster-wide and trips a
// breaker that pages a human.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=dfc,categories=rampart
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a flow control name is at most 63 characters: it becomes part of its webhook's name"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Breaker",type=string,JSONPath=`.status.breaker.state`
// +kubebuilder:printcolumn:name="Counts",type=string,JSONPath=`.status.counts`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
type DeletionFlowControl struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeletionFlowControlSpec   `json:"spec"`
	Status DeletionFlowControlStatus `json:"status,omitempty"`
}

// DeletionFlowControlList is a list of DeletionFlowControl.
//
// +kubebuilder:object:root=true
type DeletionFlowControlList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeletionFlowControl `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DeletionFlowControl{}, &DeletionFlowControlList{})
}
