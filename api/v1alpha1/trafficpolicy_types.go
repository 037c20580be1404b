package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrafficPolicySpec tells `rampart gateway` what to do with the requests it
// matches: let them through unlimited (Exempt), limit their rate and
// concurrency (Limit), or refuse them (Reject). A request is judged by the
// first policy that matches it, by ascending precedence, then by name.
//
// +kubebuilder:validation:XValidation:rule="(self.action == 'Limit') == has(self.limit)",message="set limit exactly when action is Limit"
// +kubebuilder:validation:XValidation:rule="self.action == 'Reject' || !has(self.rejectMessage)",message="rejectMessage is only for action Reject"
type TrafficPolicySpec struct {
	// Precedence orders policies: the lowest number that matches wins.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Precedence int32 `json:"precedence"`

	// Match: a request is matched by any one of these clauses.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Match []TrafficMatch `json:"match"`

	// Except: a request matched by any of these clauses is not matched by
	// the policy, even if a match clause selects it.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Except []TrafficMatch `json:"except,omitempty"`

	// Action is Exempt, Limit or Reject.
	Action TrafficAction `json:"action"`

	// Limit is the token bucket and concurrency limit of action Limit.
	// +optional
	Limit *TrafficLimit `json:"limit,omitempty"`

	// RejectMessage is added to the refusal of action Reject, e.g. where
	// to read the data instead.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	RejectMessage string `json:"rejectMessage,omitempty"`

	// AccessLogPercent is the share of the policy's requests written to
	// the gateway's access log (0 to 100). Refused requests are logged
	// whatever this says, up to 20 a second for the whole gateway.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	AccessLogPercent int32 `json:"accessLogPercent,omitempty"`
}

// TrafficMatch selects requests. Every field set must match (and); within
// a list any entry may match (or). An empty field matches everything, so
// `{}` matches every request.
//
// +kubebuilder:validation:XValidation:rule="!has(self.nonResourceURLs) || (!has(self.resources) && !has(self.namespaces))",message="a clause matches either resource requests (resources, namespaces) or nonResourceURLs, not both"
type TrafficMatch struct {
	// Users, groups and service accounts of the requester, as the gateway
	// authenticated it.
	Subjects `json:",inline"`

	// UserAgents are patterns of the User-Agent header where * matches any
	// run of characters, e.g. "kubectl/*" or "*python*".
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:MinLength=1
	// +listType=set
	// +optional
	UserAgents []string `json:"userAgents,omitempty"`

	// Verbs are Kubernetes request verbs: get, list, watch, create,
	// update, patch, delete, deletecollection; "*" any.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Enum=get;list;watch;create;update;patch;delete;deletecollection;"*"
	// +listType=set
	// +optional
	Verbs []string `json:"verbs,omitempty"`

	// Resources match resource requests by API group and resource; a
	// resource may name a subresource ("pods/log", "*/status").
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Resources []TrafficResourceRule `json:"resources,omitempty"`

	// Namespaces of namespaced resource requests; "*" any namespace.
	// Cluster-scoped requests and lists across all namespaces have none,
	// so a clause naming namespaces does not match them.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +listType=set
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`

	// NonResourceURLs match paths such as "/healthz" or "/metrics"; a
	// trailing * matches any suffix ("/apis/*" does not match resource
	// requests: those are matched by resources).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^(\*|/[^*]*\*?)$`
	// +listType=set
	// +optional
	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
}

// TrafficResourceRule names resources and subresources by API group.
type TrafficResourceRule struct {
	// APIGroups of the resources; "" is the core group, "*" every group.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$`
	APIGroups []string `json:"apiGroups"`
	// Resources are plural names, "*", or RESOURCE/SUBRESOURCE where
	// either side may be "*": "pods", "pods/log", "*/status". A plain
	// resource does not match its subresources.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)(/(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?))?$`
	Resources []string `json:"resources"`
}

// TrafficAction is what the gateway does with a matched request.
// +kubebuilder:validation:Enum=Exempt;Limit;Reject
type TrafficAction string

// The traffic actions.
const (
	// ActionExempt passes requests with no limit.
	ActionExempt TrafficAction = "Exempt"
	// ActionLimit applies the policy's limit.
	ActionLimit TrafficAction = "Limit"
	// ActionReject refuses every matched request.
	ActionReject TrafficAction = "Reject"
)

// TrafficLimit is a token bucket (qps, burst) and a concurrency limit
// (maxInFlight), either of which may be left out.
//
// +kubebuilder:validation:XValidation:rule="has(self.qps) || has(self.maxInFlight)",message="set qps, maxInFlight, or both"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || has(self.qps)",message="burst needs qps"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || self.burst >= self.qps",message="burst must be at least qps"
// +kubebuilder:validation:XValidation:rule="self.key == 'Policy' || !has(self.fairShare) || self.fairShare == 'None'",message="fairShare applies to key Policy only: with key User or UserAgent every key has a bucket of its own"
type TrafficLimit struct {
	// QPS is the sustained rate in requests per second.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	QPS *int32 `json:"qps,omitempty"`
	// Burst is how many requests may come at once after a quiet period.
	// Default: qps.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	Burst *int32 `json:"burst,omitempty"`
	// MaxInFlight bounds the requests running at once (watches are not
	// counted: they are long-running by design).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`
	// Key says who owns a bucket: Policy (one shared by every matched
	// request), User or UserAgent (one per user or per user agent, each
	// with the full qps, burst and maxInFlight).
	// +kubebuilder:default=Policy
	// +optional
	Key TrafficLimitKey `json:"key,omitempty"`
	// FairShare splits a Policy bucket between the clients using it: each
	// client active in the last seconds gets an equal share of qps,
	// burst and maxInFlight, so one client over its share is refused
	// while the others still pass; beyond its share a client may use
	// the rate the others leave unused. A client alone gets the whole
	// limit.
	// None lets the first comer take everything. Default: User.
	// +optional
	FairShare FairShare `json:"fairShare,omitempty"`
}

// FairShare says between whom a Policy bucket is shared fairly.
// +kubebuilder:validation:Enum=User;UserAgent;None
type FairShare string

// The fair-share keys.
const (
	FairShareUser      FairShare = "User"
	FairShareUserAgent FairShare = "UserAgent"
	FairShareNone      FairShare = "None"
)

// TrafficLimitKey says who owns a token bucket.
// +kubebuilder:validation:Enum=Policy;User;UserAgent
type TrafficLimitKey string

// The limit keys.
const (
	KeyPolicy    TrafficLimitKey = "Policy"
	KeyUser      TrafficLimitKey = "User"
	KeyUserAgent TrafficLimitKey = "UserAgent"
)

// TrafficPolicy is a rule of `rampart gateway`: which requests it matches
// and whether they pass unlimited, under a limit, or not at all.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=rampart
// +kubebuilder:printcolumn:name="Precedence",type=integer,JSONPath=`.spec.precedence`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="QPS",type=integer,JSONPath=`.spec.limit.qps`
// +kubebuilder:printcolumn:name="InFlight",type=integer,JSONPath=`.spec.limit.maxInFlight`
type TrafficPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TrafficPolicySpec `json:"spec"`
}

// TrafficPolicyList is a list of TrafficPolicy.
//
// +kubebuilder:object:root=true
type TrafficPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TrafficPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TrafficPolicy{}, &TrafficPolicyList{})
}
