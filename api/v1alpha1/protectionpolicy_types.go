package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProtectionPolicySpec applies Rampart's label rules to the objects its
// selectors and resource list choose, so key objects need not be labelled
// one by one.
//
// +kubebuilder:validation:XValidation:rule="has(self.protection) || has(self.explicitReplicas) || (has(self.explicitDeletion) && self.explicitDeletion)",message="set protection, explicitReplicas or explicitDeletion: a policy with none protects nothing"
// +kubebuilder:validation:XValidation:rule="!has(self.explicitDeletion) || !self.explicitDeletion || self.resources.exists(r, (r.apiGroups.exists(g, g == 'apps' || g == '*') && r.resources.exists(x, x in ['deployments', 'statefulsets', 'daemonsets', 'replicasets', '*'])) || (r.apiGroups.exists(g, size(g) == 0 || g == '*') && r.resources.exists(x, x in ['replicationcontrollers', '*'])))",message="explicitDeletion labels the running pods of the workloads the policy covers: list deployments, statefulsets, daemonsets or replicasets (API group apps) or replicationcontrollers (the core group \"\") among its resources"
type ProtectionPolicySpec struct {
	// Resources the policy covers, as API groups and resource names
	// ("" is the core group). "*" matches every resource of the groups.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Resources []ResourceRule `json:"resources"`

	// NamespaceSelector chooses the namespaces whose objects are covered
	// (for cluster-scoped objects it is ignored). Empty or absent: all.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// ObjectSelector chooses the covered objects by their own labels.
	// Empty or absent: all objects of the resources.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`

	// Protection is the deletion rule applied to covered objects.
	// +optional
	Protection ProtectionLevel `json:"protection,omitempty"`

	// ExplicitReplicas, when set, makes replica changes of covered objects
	// need the rampart.io/confirm-replicas annotation.
	// +optional
	ExplicitReplicas *ExplicitReplicas `json:"explicitReplicas,omitempty"`

	// ExplicitDeletion, when true, has Rampart's manager label the running
	// pods of the covered workloads (Deployments through their
	// ReplicaSets, StatefulSets, DaemonSets, ReplicaSets,
	// ReplicationControllers) rampart.io/explicit-deletion=true, so the
	// node guard lets only an API delete end them. Policies in Warn mode
	// label nothing. Turning it off takes back the labels the manager
	// wrote (not ones written by hand). Jobs' pods are never labelled: they
	// are meant to end.
	// +optional
	ExplicitDeletion bool `json:"explicitDeletion,omitempty"`

	// Exempt names requesters the policy never denies.
	// +optional
	Exempt Subjects `json:"exempt,omitempty"`

	// Mode Enforce denies; Warn admits and returns an admission warning.
	// +kubebuilder:default=Enforce
	// +optional
	Mode PolicyMode `json:"mode,omitempty"`
}

// ResourceRule names resources by API group and plural name.
type ResourceRule struct {
	// APIGroups of the resources; "" is the core group, "*" every group.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$`
	// +kubebuilder:validation:items:MaxLength=253
	APIGroups []string `json:"apiGroups"`
	// Resources are plural resource names, e.g. "deployments", or "*".
	// Subresources are not protected objects and are not accepted.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`
	// +kubebuilder:validation:items:MaxLength=63
	Resources []string `json:"resources"`
}

// ExplicitReplicas says which replica changes need confirmation.
type ExplicitReplicas struct {
	// Guard is All (every change), Decrease (only decreases) or ToZero
	// (only a change to 0).
	// +kubebuilder:default=All
	// +optional
	Guard ReplicaGuard `json:"guard,omitempty"`
}

// ReplicaGuard says which replica changes need confirmation.
// +kubebuilder:validation:Enum=All;Decrease;ToZero
type ReplicaGuard string

// The replica guards.
const (
	GuardAll      ReplicaGuard = "All"
	GuardDecrease ReplicaGuard = "Decrease"
	GuardToZero   ReplicaGuard = "ToZero"
)

// PolicyMode says whether a policy denies or only warns.
// +kubebuilder:validation:Enum=Enforce;Warn
type PolicyMode string

// The policy modes.
const (
	ModeEnforce PolicyMode = "Enforce"
	ModeWarn    PolicyMode = "Warn"
)

// Subjects names requesters: users, groups and service accounts.
type Subjects struct {
	// +optional
	// +listType=set
	Users []string `json:"users,omitempty"`
	// +optional
	// +listType=set
	Groups []string `json:"groups,omitempty"`
	// +optional
	// +listType=atomic
	ServiceAccounts []ServiceAccountRef `json:"serviceAccounts,omitempty"`
}

// ServiceAccountRef names a service account.
type ServiceAccountRef struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ProtectionPolicyStatus is what the manager observed of the policy.
type ProtectionPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is True once the webhooks enforce the policy.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProtectionPolicy applies deletion protection and explicit replicas to
// objects chosen by selectors and resources.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pp,categories=rampart
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a policy name is at most 63 characters: it becomes part of its webhook's name"
// +kubebuilder:printcolumn:name="Protection",type=string,JSONPath=`.spec.protection`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProtectionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProtectionPolicySpec   `json:"spec"`
	Status ProtectionPolicyStatus `json:"status,omitempty"`
}

// ProtectionPolicyList is a list of ProtectionPolicy.
//
// +kubebuilder:object:root=true
type ProtectionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProtectionPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProtectionPolicy{}, &ProtectionPolicyList{})
}
