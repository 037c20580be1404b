// Package trafficprofile profiles the clients of a Kubernetes API server
// from kube-apiserver's audit logs and the gateway's traffic log: who
// sends what, how fast at peak, what their LISTs cost; it sizes
// TrafficPolicies from what it saw and replays a log against policies
// with the gateway's own decisions. Reading is streaming: memory depends
// on the number of clients and resources, not on the size of the logs.
package trafficprofile

import (
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/rampart-io/rampart/internal/plumbing/trafficlog"
)

// Entry is one request, from either kind of log.
type Entry struct {
	// Time is when the request was received.
	Time time.Time
	// Latency is from receipt to the answer's end (a watch's duration).
	Latency time.Duration

	// User and Groups are who the API server authorised: the user a
	// client impersonated (kubectl --as, an impersonating proxy, Rampart's
	// gateway), as API Priority and Fairness and RBAC see it.
	User      string
	Groups    []string
	UserAgent string
	// Proxy and ProxyGroups are the client that authenticated and
	// impersonated User; empty when it impersonated no one.
	Proxy       string
	ProxyGroups []string

	Verb        string
	APIGroup    string
	APIVersion  string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// URI is the request URI where the log has it (audit logs): the
	// replay reads a LIST's limit and resourceVersion from it.
	URI string
	// Path is a non-resource request's path.
	Path string

	Code int
	// Objects a LIST returned, Bytes of the answer; -1 when unknown.
	Objects int64
	Bytes   int64
	// WatchEvents are the events a watch sent (traffic log only).
	WatchEvents int64
	// Weight is how many requests the entry stands for (a sampled
	// traffic log's lines stand for several).
	Weight int64
	// Refused is set when the gateway's traffic log says the gateway
	// itself refused the request.
	Refused bool
}

// IsResource says whether the request named a resource.
func (e *Entry) IsResource() bool { return e.Resource != "" }

// LongRunning says whether the request holds its connection open by
// design (as kube-apiserver decides it): its latency is not a cost.
func (e *Entry) LongRunning() bool {
	switch e.Verb {
	case "watch", "proxy":
		return true
	}
	switch e.Subresource {
	case "exec", "attach", "portforward", "proxy", "log":
		return true
	}
	return false
}

// fromAudit fills e from an audit event; false for events of a stage that
// does not end the request (each request is counted once, when it ends).
func fromAudit(ev *auditv1.Event, e *Entry) bool {
	if ev.Stage != auditv1.StageResponseComplete && ev.Stage != auditv1.StagePanic {
		return false
	}
	*e = Entry{
		Time:      ev.RequestReceivedTimestamp.Time,
		User:      ev.User.Username,
		Groups:    ev.User.Groups,
		UserAgent: ev.UserAgent,
		Verb:      ev.Verb,
		URI:       ev.RequestURI,
		Objects:   -1,
		Bytes:     -1,
		Weight:    1,
	}
	if imp := ev.ImpersonatedUser; imp != nil && imp.Username != "" {
		e.User, e.Groups, e.Proxy, e.ProxyGroups = imp.Username, imp.Groups, ev.User.Username, ev.User.Groups
	}
	if !ev.StageTimestamp.IsZero() && !e.Time.IsZero() {
		e.Latency = ev.StageTimestamp.Sub(e.Time)
	}
	if r := ev.ObjectRef; r != nil && r.Resource != "" {
		e.APIGroup, e.APIVersion, e.Resource, e.Subresource, e.Namespace, e.Name = r.APIGroup, r.APIVersion, r.Resource, r.Subresource, r.Namespace, r.Name
	} else {
		e.Path = pathOf(ev.RequestURI)
	}
	switch {
	case ev.ResponseStatus != nil:
		e.Code = int(ev.ResponseStatus.Code)
	case ev.Stage == auditv1.StagePanic:
		e.Code = 500
	}
	if e.Verb == "list" && ev.ResponseObject != nil {
		e.Bytes = int64(len(ev.ResponseObject.Raw))
		e.Objects = countItems(ev.ResponseObject.Raw)
	}
	return true
}

func fromRecord(r *trafficlog.Record, e *Entry) {
	*e = Entry{
		Time:        r.Time,
		Latency:     time.Duration(r.LatencyMillis * float64(time.Millisecond)),
		User:        r.User,
		Groups:      r.Groups,
		UserAgent:   r.UserAgent,
		Verb:        r.Verb,
		APIGroup:    r.APIGroup,
		APIVersion:  r.APIVersion,
		Resource:    r.Resource,
		Subresource: r.Subresource,
		Namespace:   r.Namespace,
		Name:        r.Name,
		Path:        r.Path,
		Code:        r.Code,
		Objects:     -1,
		Bytes:       r.ResponseBytes,
		WatchEvents: r.WatchEvents,
		Weight:      int64(max(r.SampleEvery, 1)),
		Refused:     r.Verdict == trafficlog.VerdictRefused,
	}
	if r.Objects != nil {
		e.Objects = *r.Objects
	}
	if r.Impersonated != "" {
		// The traffic log names the impersonated user, not its groups.
		e.User, e.Groups, e.Proxy, e.ProxyGroups = r.Impersonated, nil, r.User, r.Groups
	}
}

func pathOf(uri string) string {
	for i := range len(uri) {
		if uri[i] == '?' {
			return uri[:i]
		}
	}
	return uri
}
