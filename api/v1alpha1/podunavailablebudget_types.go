package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PodUnavailableBudgetSpec bounds how many pods of a workload may be
// unavailable through any disruption Rampart judges: delete, eviction,
// in-place update, resize.
//
// +kubebuilder:validation:XValidation:rule="has(self.selector) != has(self.targetRef)",message="set exactly one of selector and targetRef"
// +kubebuilder:validation:XValidation:rule="(has(self.gang) && self.gang) || has(self.maxUnavailable) != has(self.minAvailable)",message="set exactly one of maxUnavailable and minAvailable"
// +kubebuilder:validation:XValidation:rule="!(has(self.gang) && self.gang) || (has(self.groupBy) && has(self.maxGroupsDisrupted) && !has(self.maxUnavailable) && !has(self.minAvailable))",message="a gang budget counts whole groups: set groupBy and maxGroupsDisrupted, and neither maxUnavailable nor minAvailable"
// +kubebuilder:validation:XValidation:rule="has(self.groupBy) || !has(self.maxGroupsDisrupted)",message="maxGroupsDisrupted needs groupBy: it caps how many of the groups groupBy makes may be disrupted at once"
type PodUnavailableBudgetSpec struct {
	// Selector chooses the pods, in the budget's namespace.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// TargetRef names a workload whose pods the budget covers, including
	// custom workloads with a scale subresource.
	// +optional
	TargetRef *TargetReference `json:"targetRef,omitempty"`
	// MaxUnavailable is a count or a percentage of the pods (rounded up).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$') && int(self.replace('%', '')) <= 100",message="a count of 0 or more, or a percentage from 0% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// MinAvailable is a count or a percentage of the pods (rounded up).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$') && int(self.replace('%', '')) <= 100",message="a count of 0 or more, or a percentage from 0% to 100%"
	// +optional
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`
	// ProtectOperations are the disruptions the budget judges. Default:
	// Delete, Evict, Update.
	// +kubebuilder:default={Delete,Evict,Update}
	// +listType=set
	// +optional
	ProtectOperations []DisruptionOperation `json:"protectOperations,omitempty"`
	// IgnoredPodSelector excludes pods from the budget (not counted, not
	// judged).
	// +optional
	IgnoredPodSelector *metav1.LabelSelector `json:"ignoredPodSelector,omitempty"`
	// UnhealthyPodPolicy is what a disruption of a pod that is already
	// unavailable (not Ready, or on a node that is NotReady or unreachable)
	// costs, for every disruption the budget judges — as a
	// PodDisruptionBudget's unhealthyPodEvictionPolicy does for evictions.
	// AlwaysAllow (the default): it costs nothing and is admitted, so the
	// node lifecycle controller, a drain and the workload's own controller
	// replace broken pods without waiting on the budget. IfHealthyBudget:
	// admitted free only while the budget has its desired pods available.
	// Never: decided like a healthy pod's. Whatever the policy, while most
	// of the nodes the budget's pods run on are NotReady at once (a
	// partition, not a dead node), such pods are decided like healthy ones.
	// +kubebuilder:default=AlwaysAllow
	// +optional
	UnhealthyPodPolicy UnhealthyPodPolicy `json:"unhealthyPodPolicy,omitempty"`
	// GroupBy splits the budget's pods into groups by a label's value (a
	// shard's index, a StatefulSet's or a Job's name) and applies
	// maxUnavailable or minAvailable to each group instead of to all the
	// pods: a store of 200 shards of 3 can lose one pod of every shard at
	// once, never two of one shard. Pods without the label form one group
	// of their own, "(none)".
	// +optional
	GroupBy *PodGroupBy `json:"groupBy,omitempty"`
	// MaxGroupsDisrupted caps how many groups may be disrupted at once: a
	// group is disrupted while any of its pods is unavailable or has a
	// disruption in progress. A disruption in a group already disrupted
	// does not count again.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxGroupsDisrupted *int32 `json:"maxGroupsDisrupted,omitempty"`
	// Gang makes the disruption of any pod of a group the whole group's
	// (a training job's workers lose their progress together): a group
	// may be broken only while fewer than maxGroupsDisrupted are, and
	// the other pods of a group already broken may go freely — they are
	// lost anyway. Needs groupBy and maxGroupsDisrupted, and neither
	// maxUnavailable nor minAvailable.
	// +optional
	Gang bool `json:"gang,omitempty"`
}

// PodGroupBy says how a budget's pods are grouped.
type PodGroupBy struct {
	// LabelKey is the pod label whose value names a pod's group.
	// +kubebuilder:validation:MinLength=1
	LabelKey string `json:"labelKey"`
}

// PodGroupStatus is one group of a budget with groupBy, as last computed.
type PodGroupStatus struct {
	// Name is the group's label value ("(none)" for pods without it).
	Name string `json:"name"`
	// Total are the pods the group should have.
	Total int32 `json:"total"`
	// Available are its pods Ready and not disrupted.
	Available int32 `json:"available"`
	// Desired is the floor the budget keeps in the group.
	Desired int32 `json:"desired"`
	// Allowed is how many more of its pods may be disrupted now (within
	// the group; maxGroupsDisrupted may still refuse).
	Allowed int32 `json:"allowed"`
	// Disruptions are the group's admitted disruptions not yet observed.
	// +optional
	Disruptions int32 `json:"disruptions,omitempty"`
}

// UnhealthyPodPolicy is what a disruption of an already unavailable pod
// costs a budget.
// +kubebuilder:validation:Enum=AlwaysAllow;IfHealthyBudget;Never
type UnhealthyPodPolicy string

// The unhealthy-pod policies.
const (
	UnhealthyAlwaysAllow     UnhealthyPodPolicy = "AlwaysAllow"
	UnhealthyIfHealthyBudget UnhealthyPodPolicy = "IfHealthyBudget"
	UnhealthyNever           UnhealthyPodPolicy = "Never"
)

// TargetReference names a workload in the budget's namespace.
type TargetReference struct {
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// DisruptionOperation is a kind of disruption a budget judges.
// +kubebuilder:validation:Enum=Delete;Evict;Update;Resize
type DisruptionOperation string

// The disruption operations.
const (
	DisruptDelete DisruptionOperation = "Delete"
	DisruptEvict  DisruptionOperation = "Evict"
	DisruptUpdate DisruptionOperation = "Update"
	DisruptResize DisruptionOperation = "Resize"
)

// PodUnavailableBudgetStatus is the budget as last computed.
type PodUnavailableBudgetStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Selector is the label selector of the pods the budget covers: the
	// spec's, or the target workload's. Every manager replica matches pods
	// against it.
	// +optional
	Selector string `json:"selector,omitempty"`
	// TotalReplicas are the pods the budget covers (desired replicas for a
	// targetRef).
	TotalReplicas int32 `json:"totalReplicas"`
	// CurrentAvailable are the covered pods Ready and not disrupted.
	CurrentAvailable int32 `json:"currentAvailable"`
	// DesiredAvailable is the floor the budget keeps.
	DesiredAvailable int32 `json:"desiredAvailable"`
	// UnavailableAllowed is how many more disruptions may be admitted now.
	UnavailableAllowed int32 `json:"unavailableAllowed"`
	// Disruptions are admitted disruptions not yet observed, by pod name.
	// +optional
	Disruptions map[string]metav1.Time `json:"disruptions,omitempty"`
	// DisruptionUIDs is the UID of each pod in Disruptions: a StatefulSet's
	// new pod takes the name of the one disrupted.
	// +optional
	DisruptionUIDs map[string]string `json:"disruptionUIDs,omitempty"`
	// DisruptionOps is the kind of each disruption in Disruptions: a
	// delete's or an eviction's is seen done when its pod is going, an
	// update's or a resize's when its pod is not Ready.
	// +optional
	DisruptionOps map[string]DisruptionOperation `json:"disruptionOps,omitempty"`
	// DisruptionGroups is the group of each disruption in Disruptions, for
	// a budget with groupBy.
	// +optional
	DisruptionGroups map[string]string `json:"disruptionGroups,omitempty"`
	// Groups is how many groups a budget with groupBy has.
	// +optional
	Groups int32 `json:"groups,omitempty"`
	// DisruptedGroups is how many of them are disrupted now: a pod
	// unavailable, or a disruption in progress.
	// +optional
	DisruptedGroups int32 `json:"disruptedGroups,omitempty"`
	// GroupStatus lists the disrupted groups, those closest to their floor
	// first, at most 1000 of them: a group not listed has all its pods
	// available and no disruption in progress. A disruption in an unlisted
	// group is refused while more groups are disrupted than listed.
	// +optional
	// +listType=atomic
	GroupStatus []PodGroupStatus `json:"groupStatus,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodUnavailableBudget is a disruption budget for every disruption, not only
// evictions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pub,categories=rampart
// +kubebuilder:printcolumn:name="Allowed",type=integer,JSONPath=`.status.unavailableAllowed`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.currentAvailable`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredAvailable`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.totalReplicas`
// +kubebuilder:printcolumn:name="Groups",type=integer,JSONPath=`.status.groups`,priority=1
// +kubebuilder:printcolumn:name="Disrupted-Groups",type=integer,JSONPath=`.status.disruptedGroups`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodUnavailableBudget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodUnavailableBudgetSpec   `json:"spec"`
	Status PodUnavailableBudgetStatus `json:"status,omitempty"`
}

// PodUnavailableBudgetList is a list of PodUnavailableBudget.
//
// +kubebuilder:object:root=true
type PodUnavailableBudgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodUnavailableBudget `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PodUnavailableBudget{}, &PodUnavailableBudgetList{})
}
