package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrafficPolicySpec tells `rampart gateway` what to do with the requests it
// matches: let them through unguarded (Exempt), guard them (Limit: rate
// and concurrency, LIST cost, watches, a circuit breaker), refuse them
// (Reject), or send them to API servers of their own (Route). A request is
// judged by the first policy that matches it, by ascending precedence,
// then by name.
//
// +kubebuilder:validation:XValidation:rule="(self.action == 'Limit') == (has(self.limit) || has(self.list) || has(self.watch) || has(self.breaker))",message="action Limit needs at least one of limit, list, watch or breaker, and only action Limit may have them"
// +kubebuilder:validation:XValidation:rule="self.action == 'Reject' || !has(self.rejectMessage)",message="rejectMessage is only for action Reject"
// +kubebuilder:validation:XValidation:rule="(self.action == 'Route') == has(self.route)",message="action Route needs route (the pool to send requests to), and only action Route may have it"
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

	// Action is Exempt, Limit, Reject or Route.
	Action TrafficAction `json:"action"`

	// Route names the gateway's upstream pool that serves what the policy
	// matches (action Route), and what happens when none of the pool's
	// API servers is available.
	// +optional
	Route *TrafficRoute `json:"route,omitempty"`

	// Limit is the token bucket and concurrency limit of action Limit.
	// +optional
	Limit *TrafficLimit `json:"limit,omitempty"`

	// List guards the API servers against expensive LISTs (action Limit).
	// +optional
	List *TrafficListGuard `json:"list,omitempty"`

	// Watch guards the API servers against too many watches and against
	// reconnect storms (action Limit).
	// +optional
	Watch *TrafficWatchGuard `json:"watch,omitempty"`

	// Breaker is a circuit breaker for the requests the policy matches
	// (action Limit): opened by hand or on upstream distress, it refuses
	// them at once; closing, it lets them back gradually.
	// +optional
	Breaker *TrafficBreaker `json:"breaker,omitempty"`

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
// +kubebuilder:validation:XValidation:rule="!has(self.impersonated) || has(self.users) || has(self.groups) || has(self.serviceAccounts)",message="a clause with impersonated must also name the clients that impersonate (users, groups or serviceAccounts): a clause on the impersonated user alone would let any client allowed to impersonate leave its own policy"
type TrafficMatch struct {
	// Users, groups and service accounts of the requester, as the gateway
	// authenticated it: the client, never the user it impersonates.
	Subjects `json:",inline"`

	// Impersonated, for platform APIs that act for their users: the
	// users, groups and service accounts the client impersonates
	// (Impersonate-User, Impersonate-Group), as the gateway allowed by
	// SubjectAccessReview. A clause with it matches only requests that
	// impersonate one of them, sent by a client the clause also names:
	// it narrows what a policy for that client matches, so a client is
	// judged by whom it impersonates only where a policy naming it says
	// so. Budgets of key User stay the client's.
	// +kubebuilder:validation:XValidation:rule="has(self.users) || has(self.groups) || has(self.serviceAccounts)",message="impersonated names users, groups or serviceAccounts"
	// +optional
	Impersonated *Subjects `json:"impersonated,omitempty"`

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
// +kubebuilder:validation:Enum=Exempt;Limit;Reject;Route
type TrafficAction string

// The traffic actions.
const (
	// ActionExempt passes requests with no limit.
	ActionExempt TrafficAction = "Exempt"
	// ActionLimit applies the policy's limit.
	ActionLimit TrafficAction = "Limit"
	// ActionReject refuses every matched request.
	ActionReject TrafficAction = "Reject"
	// ActionRoute sends matched requests, with no limit, to the API
	// servers of the policy's route pool.
	ActionRoute TrafficAction = "Route"
)

// TrafficRoute sends the requests a policy matches to one of the gateway's
// named upstream pools (`rampart gateway --upstream-pool NAME=URL,...`),
// balanced and health-checked within it as the default pool is: heavy
// listers on an API server of their own, so that their LISTs cost the
// other API servers neither memory nor latency. A gateway without the
// pool leaves the policy out (it logs why) and judges its requests by the
// next policy that matches.
type TrafficRoute struct {
	// Pool is the name of the gateway's upstream pool ("default" is the
	// --upstreams list).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Pool string `json:"pool"`
	// OnUnavailable says what happens to a request when none of the
	// pool's API servers is available (all failing /readyz or ejected):
	// Default sends it to the default pool; Reject answers 503 with a
	// Retry-After and a message naming the policy and the pool, so that
	// a storm never reaches the API servers it was moved away from.
	// +kubebuilder:default=Reject
	// +optional
	OnUnavailable RouteUnavailable `json:"onUnavailable,omitempty"`
}

// RouteUnavailable is what a route does when its pool is down.
// +kubebuilder:validation:Enum=Default;Reject
type RouteUnavailable string

// What a route does when its pool is down.
const (
	// RouteToDefault sends the request to the default pool.
	RouteToDefault RouteUnavailable = "Default"
	// RouteReject answers 503.
	RouteReject RouteUnavailable = "Reject"
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

// ClientKey says what makes two requests the same client's: their user
// or their user agent.
// +kubebuilder:validation:Enum=User;UserAgent
type ClientKey string

// The client keys.
const (
	ClientUser      ClientKey = "User"
	ClientUserAgent ClientKey = "UserAgent"
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

// TrafficListGuard prices a LIST by the objects it will return: the
// number of objects of its resource in its scope (the namespace, or the
// whole cluster), at most its limit (a LIST from resourceVersion=0 is
// served whole from the API server's cache whatever its limit, and priced
// so; one named by fieldSelector metadata.name costs one). A watch that
// starts by streaming every object in its scope (an informer's initial
// sync: sendInitialEvents=true, or no resourceVersion) is priced the same
// against the same budget, when the policy matches watches. Other
// requests cost nothing here.
//
// +kubebuilder:validation:XValidation:rule="has(self.objectsPerSecond) || has(self.maxUnpaginatedObjects)",message="set objectsPerSecond, maxUnpaginatedObjects, or both"
// +kubebuilder:validation:XValidation:rule="!has(self.objectsBurst) || has(self.objectsPerSecond)",message="objectsBurst needs objectsPerSecond"
// +kubebuilder:validation:XValidation:rule="!has(self.objectsBurst) || self.objectsBurst >= self.objectsPerSecond",message="objectsBurst must be at least objectsPerSecond"
type TrafficListGuard struct {
	// ObjectsPerSecond is each client's budget of LIST cost, in objects
	// per second. A LIST larger than the burst is admitted when the
	// client's budget is full and leaves it in debt: the client's next
	// LISTs wait until it is paid back.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	// +optional
	ObjectsPerSecond *int32 `json:"objectsPerSecond,omitempty"`
	// ObjectsBurst is the most a client's budget holds. Default:
	// objectsPerSecond.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	ObjectsBurst *int32 `json:"objectsBurst,omitempty"`
	// Key says who a budget belongs to: User (default) or UserAgent.
	// +optional
	Key ClientKey `json:"key,omitempty"`
	// MaxUnpaginatedObjects refuses a LIST that the API server would read
	// whole from etcd (no limit, resourceVersion not "0") when its scope
	// holds more objects than this. The refusal tells the client to
	// paginate (limit=500, as kubectl does) or to read from the API
	// server's cache (resourceVersion=0, as informers do).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	// +optional
	MaxUnpaginatedObjects *int32 `json:"maxUnpaginatedObjects,omitempty"`
}

// TrafficWatchGuard bounds each client's watches and the rate at which
// new ones reach the API servers.
//
// +kubebuilder:validation:XValidation:rule="has(self.maxPerClient) || has(self.newPerSecond) || has(self.policyNewPerSecond)",message="set at least one of maxPerClient, newPerSecond or policyNewPerSecond"
// +kubebuilder:validation:XValidation:rule="!has(self.newBurst) || has(self.newPerSecond)",message="newBurst needs newPerSecond"
// +kubebuilder:validation:XValidation:rule="!has(self.newBurst) || self.newBurst >= self.newPerSecond",message="newBurst must be at least newPerSecond"
type TrafficWatchGuard struct {
	// MaxPerClient bounds the watches a client holds open at once.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	MaxPerClient *int32 `json:"maxPerClient,omitempty"`
	// NewPerSecond bounds the watches a client opens per second.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	NewPerSecond *int32 `json:"newPerSecond,omitempty"`
	// NewBurst is how many watches a client may open at once after a
	// quiet period. Default: newPerSecond.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	NewBurst *int32 `json:"newBurst,omitempty"`
	// PolicyNewPerSecond bounds the new watches of all the policy's
	// clients together. A reconnect storm beyond it is spread out: each
	// refused watch gets a Retry-After drawn over the time the storm
	// needs at this rate, and client-go retries a refused watch without
	// relisting.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	PolicyNewPerSecond *int32 `json:"policyNewPerSecond,omitempty"`
	// Key says who a client is: User (default) or UserAgent.
	// +optional
	Key ClientKey `json:"key,omitempty"`
}

// TrafficBreaker is a circuit breaker. Open, it refuses every request the
// policy matches at once (429 with Retry-After, which client-go honours);
// closing, it lets through a share of them that grows from none to all
// over rampSeconds. Requests matched by an Exempt policy of lower
// precedence (the control plane's own components) never reach it.
type TrafficBreaker struct {
	// Open opens the breaker by hand until it is set back to false:
	// `rampart gateway breaker open|close --policy NAME`.
	// +optional
	Open bool `json:"open,omitempty"`
	// ClosedAt is when an operator last closed the breaker by hand
	// (`rampart gateway breaker close` sets it, with open false). It ends
	// a trip too: each gateway that sees it change lets an automatic open
	// back through the ramp at once, and judges distress again only from
	// answers after it, so old distress cannot reopen the breaker.
	// +optional
	ClosedAt *metav1.Time `json:"closedAt,omitempty"`
	// RampSeconds is how long, after the breaker closes, the share of
	// matched requests let through takes to grow from none to all.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=30
	// +optional
	RampSeconds int32 `json:"rampSeconds,omitempty"`
	// Trip opens the breaker by itself when the API servers show
	// distress, and closes it (through the ramp) after openSeconds.
	// +optional
	Trip *TrafficBreakerTrip `json:"trip,omitempty"`
}

// TrafficBreakerTrip says when the API servers are in distress: any one
// threshold crossed, judged over every response the gateway's API servers
// gave in the last forSeconds (the gateway's own refusals are not
// counted).
//
// +kubebuilder:validation:XValidation:rule="has(self.errorPercent) || has(self.tooManyRequestsPercent) || has(self.latencyMilliseconds)",message="set at least one of errorPercent, tooManyRequestsPercent or latencyMilliseconds"
type TrafficBreakerTrip struct {
	// ErrorPercent trips on this share of 5xx answers, or more.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	ErrorPercent *int32 `json:"errorPercent,omitempty"`
	// TooManyRequestsPercent trips on this share of 429 answers (the API
	// server's own priority and fairness refusing), or more.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TooManyRequestsPercent *int32 `json:"tooManyRequestsPercent,omitempty"`
	// LatencyMilliseconds trips when the 90th percentile latency of
	// short requests (not watches) is above this.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600000
	// +optional
	LatencyMilliseconds *int32 `json:"latencyMilliseconds,omitempty"`
	// ForSeconds is how long a threshold must stay crossed.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600
	// +kubebuilder:default=10
	// +optional
	ForSeconds int32 `json:"forSeconds,omitempty"`
	// MinRequestsPerSecond: below this rate of answers, the API servers
	// are not judged (a few slow requests are not distress).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +kubebuilder:default=5
	// +optional
	MinRequestsPerSecond int32 `json:"minRequestsPerSecond,omitempty"`
	// OpenSeconds is how long a tripped breaker stays open before it
	// ramps back; if the distress is still there, it opens again.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=30
	// +optional
	OpenSeconds int32 `json:"openSeconds,omitempty"`
}

// BreakerState is Closed, Open or Ramping.
// +kubebuilder:validation:Enum=Closed;Open;Ramping
type BreakerState string

// The breaker states.
const (
	BreakerClosed  BreakerState = "Closed"
	BreakerOpen    BreakerState = "Open"
	BreakerRamping BreakerState = "Ramping"
)

// TrafficPolicyStatus is what the gateways report about a policy.
type TrafficPolicyStatus struct {
	// Breakers is the breaker's state in each gateway replica that has
	// one. A replica that restarts goes on from its own entry: a breaker
	// that tripped stays open for the rest of openSeconds.
	// +listType=map
	// +listMapKey=gateway
	// +optional
	Breakers []GatewayBreakerStatus `json:"breakers,omitempty"`
}

// GatewayBreakerStatus is one gateway replica's breaker for a policy.
type GatewayBreakerStatus struct {
	// Gateway names the replica (its pod or host name).
	Gateway string `json:"gateway"`
	// State is Closed, Open or Ramping.
	State BreakerState `json:"state"`
	// Reason says why it is in this state: opened by hand, or which
	// threshold tripped it with the measured value.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Since is when it entered this state.
	Since metav1.Time `json:"since"`
}

// TrafficPolicy is a rule of `rampart gateway`: which requests it matches
// and whether they pass unlimited, under a limit, or not at all.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=rampart
// +kubebuilder:printcolumn:name="Precedence",type=integer,JSONPath=`.spec.precedence`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.route.pool`
// +kubebuilder:printcolumn:name="QPS",type=integer,JSONPath=`.spec.limit.qps`
// +kubebuilder:printcolumn:name="InFlight",type=integer,JSONPath=`.spec.limit.maxInFlight`
// +kubebuilder:printcolumn:name="Breaker",type=string,JSONPath=`.status.breakers[0].state`
// +kubebuilder:subresource:status
type TrafficPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TrafficPolicySpec `json:"spec"`
	// +optional
	Status TrafficPolicyStatus `json:"status,omitempty"`
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
