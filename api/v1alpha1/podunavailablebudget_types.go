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
// +kubebuilder:validation:XValidation:rule="has(self.maxUnavailable) != has(self.minAvailable)",message="set exactly one of maxUnavailable and minAvailable"
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
