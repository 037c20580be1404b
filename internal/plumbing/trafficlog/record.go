// Package trafficlog is the gateway's traffic log: one JSON line per
// request it judged, an audit log extended with what kube-apiserver's own
// audit log lacks (response bytes, objects a LIST returned, a watch's
// duration and events, the TrafficPolicy and its verdict). `rampart
// traffic profile` reads it beside kube-apiserver's audit logs.
package trafficlog

import "time"

// Kind marks a line as a traffic record, so that a reader given a mix of
// files tells it from an audit.k8s.io Event (whose kind is "Event").
const Kind = "RampartTraffic"

// Record is one request as the gateway saw it. Times are UTC; a field a
// request has no value for is left out.
type Record struct {
	// Kind is always Kind; it comes first in every line.
	Kind string `json:"kind"`
	// Time is when the gateway received the request.
	Time time.Time `json:"time"`

	User      string   `json:"user"`
	Groups    []string `json:"groups,omitempty"`
	UserAgent string   `json:"userAgent,omitempty"`
	// Impersonated is the user the client impersonated, when it did.
	Impersonated string `json:"impersonated,omitempty"`

	Verb        string `json:"verb"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Resource    string `json:"resource,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	// Path is set for non-resource requests (/healthz, /apis).
	Path string `json:"path,omitempty"`

	// Code is the HTTP status the client got, the gateway's own refusals
	// (429) included.
	Code int `json:"code"`
	// LatencyMillis is from receipt to the last byte of the answer; for a
	// watch, its whole duration.
	LatencyMillis float64 `json:"latencyMillis"`
	// ResponseBytes is the size of the body sent to the client.
	ResponseBytes int64 `json:"responseBytes"`
	// Objects is the number of objects a LIST returned (items of the
	// page, rows of a Table); nil when not counted (see Counter).
	Objects *int64 `json:"objects,omitempty"`
	// WatchEvents is the events a watch sent, initial ones and
	// bookmarks included.
	WatchEvents int64 `json:"watchEvents,omitempty"`

	// Policy is the TrafficPolicy that judged the request ("" when none
	// matched), Verdict what it decided: "admitted", "exempt", or
	// "refused" with Reason (rate, in-flight, list-cost, unpaginated,
	// watch-rate, watch-storm, breaker, reject).
	Policy  string `json:"policy,omitempty"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	// Pool is the gateway's upstream pool a Route policy sent the
	// request to; empty for the default pool.
	Pool string `json:"pool,omitempty"`
	// SampleEvery is how many requests this line stands for: 1 when every
	// request of its policy is logged, 100/accessLogPercent otherwise.
	// Readers weight counts by it.
	SampleEvery int `json:"sampleEvery,omitempty"`
}

// The verdicts.
const (
	VerdictAdmitted = "admitted"
	VerdictExempt   = "exempt"
	VerdictRefused  = "refused"
)
