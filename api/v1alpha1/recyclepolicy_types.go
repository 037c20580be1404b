package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RecyclePolicySpec says which deleted objects the recycle bin keeps
// besides the ones Rampart protects (kept always), and for how long.
//
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || (duration(self.retention) >= duration('1m') && duration(self.retention) <= duration('87600h'))",message="retention must be between 1m and 87600h (10 years)"
type RecyclePolicySpec struct {
	// Resources whose deleted objects are kept, e.g. configmaps, secrets,
	// services, custom resources. Events are never kept.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Resources []ResourceRule `json:"resources"`

	// NamespaceSelector and ObjectSelector narrow what is kept.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// Retention is how long a copy is kept after the delete, e.g. 168h.
	// +kubebuilder:default="168h"
	// +optional
	Retention string `json:"retention,omitempty"`

	// MaxSize caps what the policy's copies take in the store; the oldest
	// go first once it is reached. Absent: no cap but retention.
	// +optional
	MaxSize *resource.Quantity `json:"maxSize,omitempty"`
}

// RecyclePolicyStatus is what the manager reports of a RecyclePolicy.
type RecyclePolicyStatus struct {
	// ObservedGeneration is the generation the Ready condition speaks of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (True once the policy's webhook is registered:
	// from then on each delete it selects is kept first).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RecyclePolicy has the recycle bin keep a copy of each object it selects
// before the object's delete is admitted; a delete whose copy cannot be
// stored is refused.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=rcp,categories=rampart
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a recycle policy name is at most 63 characters: it becomes part of its webhook's name"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Retention",type=string,JSONPath=`.spec.retention`
// +kubebuilder:printcolumn:name="Max size",type=string,JSONPath=`.spec.maxSize`
type RecyclePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RecyclePolicySpec   `json:"spec"`
	Status RecyclePolicyStatus `json:"status,omitempty"`
}

// RecyclePolicyList is a list of RecyclePolicy.
//
// +kubebuilder:object:root=true
type RecyclePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RecyclePolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RecyclePolicy{}, &RecyclePolicyList{})
}
