package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NodeDisruptionBudgetSpec is the water level of a pool of nodes: how many
// of them stay Ready and schedulable, and how fast they may leave service.
//
// +kubebuilder:validation:XValidation:rule="has(self.minAvailable) || has(self.rate)",message="give minAvailable, rate, or both"
type NodeDisruptionBudgetSpec struct {
	// NodeSelector chooses the nodes (a pool, a zone); empty chooses every
	// node.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// MinAvailable is how many of the selected nodes stay Ready and
	// schedulable: a count, or a percentage of the selected nodes
	// (rounded up).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$') && int(self.replace('%', '')) <= 100",message="a count of 0 or more, or a percentage from 0% to 100%"
	// +optional
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`
	// Rate is at most Count selected nodes leaving service in any Window.
	// +optional
	Rate *DisruptionRate `json:"rate,omitempty"`
	// Exempt subjects are neither counted nor refused.
	// +optional
	Exempt Subjects `json:"exempt,omitempty"`
}

// DisruptionRate is at most Count disruptions in any Window.
//
// +kubebuilder:validation:XValidation:rule="duration(self.window) >= duration('10s') && duration(self.window) <= duration('720h')",message="window must be between 10s and 720h"
type DisruptionRate struct {
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
	// Window is a duration such as 10m, 1h or 24h.
	Window string `json:"window"`
}

// NodeDisruption is one selected node leaving service, as admitted.
type NodeDisruption struct {
	Node string `json:"node"`
	// Kind is how it left: Delete, Cordon or Taint.
	Kind string      `json:"kind"`
	User string      `json:"user"`
	Time metav1.Time `json:"time"`
	// ResourceVersion is the node's as the departure found it: while a
	// cache still reads the node at it, the cache has not seen the
	// departure yet.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// NodeDisruptionBudgetStatus is the budget's shared, durable state: every
// replica of the manager records an admitted disruption here, with
// optimistic concurrency, before it is admitted.
type NodeDisruptionBudgetStatus struct {
	// ExpectedNodes are the selected nodes, as of the last decision, with
	// those deleted in service in the last hour (still the pool's, out of
	// service).
	// +optional
	ExpectedNodes int32 `json:"expectedNodes"`
	// AvailableNodes are the selected nodes Ready and schedulable, as of
	// the last decision.
	// +optional
	AvailableNodes int32 `json:"availableNodes"`
	// DesiredAvailable is MinAvailable resolved against ExpectedNodes.
	// +optional
	DesiredAvailable int32 `json:"desiredAvailable"`
	// Disruptions are the selected nodes that left service lately, newest
	// first: within the rate's window, and for a short while after each
	// (until every cache reads the node out of service).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Disruptions []NodeDisruption `json:"disruptions,omitempty"`
	// RecentDenied are the latest refusals, newest first.
	// +optional
	// +listType=atomic
	RecentDenied []DeniedRequester `json:"recentDenied,omitempty"`
	// ObservedGeneration is the generation the Ready condition speaks of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (True once the budget's webhook is registered).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeDisruptionBudget keeps a pool of nodes above a water level: it counts
// every way a selected node leaves service (delete, cordon, a NoSchedule or
// NoExecute taint) and refuses the one that would take the Ready,
// schedulable nodes below MinAvailable or over the Rate. The node
// lifecycle controller's health taints and the kubelet's own writes are
// never refused.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ndb,categories=rampart
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a node budget name is at most 63 characters: it becomes part of its webhook's name"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Min",type=string,JSONPath=`.spec.minAvailable`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableNodes`
// +kubebuilder:printcolumn:name="Expected",type=integer,JSONPath=`.status.expectedNodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeDisruptionBudget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeDisruptionBudgetSpec   `json:"spec"`
	Status NodeDisruptionBudgetStatus `json:"status,omitempty"`
}

// NodeDisruptionBudgetList is a list of NodeDisruptionBudget.
//
// +kubebuilder:object:root=true
type NodeDisruptionBudgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeDisruptionBudget `json:"items"`
}

func init() {
	SchemeBuilder.Register(&NodeDisruptionBudget{}, &NodeDisruptionBudgetList{})
}
