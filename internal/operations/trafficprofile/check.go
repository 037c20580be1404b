package trafficprofile

import (
	"bytes"
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/traffic"
)

// ReadPolicies reads TrafficPolicies from YAML or JSON documents (as
// `--suggest` writes them, or as kubectl applies them).
func ReadPolicies(data []byte, name string) ([]traffic.Policy, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []traffic.Policy
	for doc := 1; ; doc++ {
		var tp v1alpha1.TrafficPolicy
		if err := dec.Decode(&tp); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s, document %d: %w", name, doc, err)
		}
		if tp.Kind == "" && tp.Name == "" {
			continue // an empty document
		}
		if tp.Kind != "TrafficPolicy" || tp.APIVersion != v1alpha1.GroupVersion.String() {
			return nil, fmt.Errorf("%s, document %d: %s %q is not a TrafficPolicy (apiVersion %s)", name, doc, tp.Kind, tp.Name, v1alpha1.GroupVersion)
		}
		if tp.Name == "" || len(tp.Spec.Match) == 0 || tp.Spec.Action == "" {
			return nil, fmt.Errorf("%s, document %d: TrafficPolicy %q needs metadata.name, spec.match and spec.action", name, doc, tp.Name)
		}
		out = append(out, traffic.Policy{Name: tp.Name, Generation: 1, Spec: tp.Spec})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no TrafficPolicy", name)
	}
	traffic.Sort(out)
	return out, nil
}

// reorderWindow is how long the replay holds entries back to put them in
// order of receipt: an audit log is written in order of answers, so a
// slow request's line comes after quicker ones received later. A line
// later than this (a long watch) is replayed at its own time anyway.
const reorderWindow = 30 * time.Second

// Replay runs entries through the gateway's own decisions (policy
// selection, the limiter, the list and watch guards), with each entry's
// receipt as the clock. Feed it entries with Add, then call Result.
//
// It replays what the log shows: every logged request is judged, as if
// the refused ones had still been sent (a refused client would have
// backed off instead). The circuit breaker is not replayed: it opens on
// the API servers' distress, which a log of one server's answers does
// not show.
type Replay struct {
	policies []traffic.Policy
	limiter  *traffic.Limiter
	guards   *traffic.Guards
	pending  entryHeap
	releases releaseHeap
	latest   time.Time
	clients  map[clientKey]*ReplayClient
	policy   map[string]*PolicyOutcome
}

// NewReplay replays against policies (sorted as ReadPolicies returns them).
func NewReplay(policies []traffic.Policy) *Replay {
	return &Replay{
		policies: policies, limiter: traffic.NewLimiter(), guards: traffic.NewGuards(),
		clients: map[clientKey]*ReplayClient{}, policy: map[string]*PolicyOutcome{},
	}
}

// ReplayClient is what the replay decided for one client.
type ReplayClient struct {
	User      string `json:"user"`
	UserAgent string `json:"userAgent"`
	// Proxy impersonated User, when one did (see ClientProfile).
	Proxy    string `json:"proxy,omitempty"`
	Kind     string `json:"kind"`
	Requests int64  `json:"requests"`
	Refused  int64  `json:"refused"`
	// ByReason counts refusals by policy and reason ("POLICY: rate").
	ByReason map[string]int64 `json:"byReason,omitempty"`
	// FirstRefused and LastRefused bound the refusals; RefusedSeconds
	// counts the distinct seconds with one.
	FirstRefused   time.Time `json:"firstRefused,omitzero"`
	LastRefused    time.Time `json:"lastRefused,omitzero"`
	RefusedSeconds int64     `json:"refusedSeconds"`
	// FirstMessage is the first refusal's message, as the client would
	// have read it.
	FirstMessage string `json:"firstMessage,omitempty"`
	lastSecond   int64
}

// PolicyOutcome is what one policy did in the replay.
type PolicyOutcome struct {
	Policy   string `json:"policy"`
	Matched  int64  `json:"matched"`
	Refused  int64  `json:"refused"`
	Exempted int64  `json:"exempted"`
}

// ReplayResult is the replay's answer: clients refused first.
type ReplayResult struct {
	Requests  int64           `json:"requests"`
	Refused   int64           `json:"refused"`
	Unmatched int64           `json:"unmatched"`
	Clients   []ReplayClient  `json:"clients"`
	Policies  []PolicyOutcome `json:"policies"`
}

// Add replays one entry (after earlier ones within the reorder window).
func (rp *Replay) Add(e *Entry) {
	if e.Time.IsZero() {
		return
	}
	heap.Push(&rp.pending, *e)
	if e.Time.After(rp.latest) {
		rp.latest = e.Time
	}
	for len(rp.pending) > 0 && rp.latest.Sub(rp.pending[0].Time) > reorderWindow {
		x := heap.Pop(&rp.pending).(Entry)
		rp.judge(&x)
	}
}

// Result flushes the held entries and returns the outcome.
func (rp *Replay) Result() ReplayResult {
	for len(rp.pending) > 0 {
		x := heap.Pop(&rp.pending).(Entry)
		rp.judge(&x)
	}
	var res ReplayResult
	for _, c := range rp.clients {
		res.Requests += c.Requests
		res.Refused += c.Refused
		res.Clients = append(res.Clients, *c)
	}
	for _, p := range rp.policy {
		res.Policies = append(res.Policies, *p)
	}
	var matched int64
	for _, p := range res.Policies {
		matched += p.Matched
	}
	res.Unmatched = res.Requests - matched
	slices.SortFunc(res.Clients, func(a, b ReplayClient) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.User, b.User), cmp.Compare(a.UserAgent, b.UserAgent), cmp.Compare(a.Proxy, b.Proxy))
	})
	slices.SortFunc(res.Policies, func(a, b PolicyOutcome) int { return cmp.Compare(a.Policy, b.Policy) })
	return res
}

func (rp *Replay) judge(e *Entry) {
	now := e.Time
	// Requests that ended by now leave their in-flight slots.
	for len(rp.releases) > 0 && !rp.releases[0].at.After(now) {
		heap.Pop(&rp.releases).(release).done()
	}
	k := clientKey{e.User, e.UserAgent, e.Proxy}
	c := rp.clients[k]
	if c == nil {
		kind, _ := Classify(e.User, e.Groups)
		c = &ReplayClient{User: e.User, UserAgent: e.UserAgent, Proxy: e.Proxy, Kind: kind, ByReason: map[string]int64{}}
		rp.clients[k] = c
	}
	c.Requests++
	req := requestOf(e)
	p := traffic.Select(rp.policies, req)
	if p == nil {
		return
	}
	out := rp.policy[p.Name]
	if out == nil {
		out = &PolicyOutcome{Policy: p.Name}
		rp.policy[p.Name] = out
	}
	out.Matched++
	var refusal, message string
	switch p.Spec.Action {
	case v1alpha1.ActionExempt, v1alpha1.ActionRoute:
		// A routed request is admitted unguarded too, on its pool's
		// API servers.
		out.Exempted++
		return
	case v1alpha1.ActionReject:
		refusal, message = "reject", fmt.Sprintf("TrafficPolicy %q refuses this request", p.Name)
	case v1alpha1.ActionLimit:
		v := rp.limiter.Decide(p, req, now)
		if !v.Allowed {
			refusal, message = v.Reason, v.Message
			break
		}
		// What the LIST returned stands for the count of its scope the
		// gateway would have known; unknown, the guards price it at
		// nothing, as the gateway does without a count.
		var counts traffic.ObjectCounts
		if e.Objects >= 0 {
			counts = traffic.ObjectCounts{Cluster: e.Objects, ClusterKnown: true, Namespace: e.Objects, NamespaceKnown: true}
		}
		gv := rp.guards.Decide(p, req, counts, now)
		if !gv.Allowed {
			v.Done()
			refusal, message = gv.Reason, gv.Message
			break
		}
		end := now.Add(max(e.Latency, 0))
		heap.Push(&rp.releases, release{at: end, done: func() { v.Done(); gv.Done() }})
	}
	if refusal == "" {
		return
	}
	out.Refused++
	c.Refused++
	c.ByReason[p.Name+": "+refusal]++
	if c.FirstRefused.IsZero() || now.Before(c.FirstRefused) {
		c.FirstRefused = now
	}
	if now.After(c.LastRefused) {
		c.LastRefused = now
	}
	if s := now.Unix(); s != c.lastSecond {
		c.lastSecond = s
		c.RefusedSeconds++
	}
	if c.FirstMessage == "" {
		c.FirstMessage = message
	}
}

// requestOf describes an entry as the gateway would have: from its URI
// with the gateway's own classifier where the log has it, else from the
// logged fields. The gateway authenticates the proxy of an impersonated
// request and knows whom it impersonates (Request.Impersonated).
func requestOf(e *Entry) traffic.Request {
	var r traffic.Request
	if u, err := url.ParseRequestURI(e.URI); e.URI != "" && err == nil {
		r = traffic.Describe(&http.Request{Method: methodOf(e.Verb), URL: u})
	} else {
		r = traffic.Request{
			IsResource: e.Resource != "", Verb: e.Verb, APIGroup: e.APIGroup, Version: e.APIVersion,
			Resource: e.Resource, Subresource: e.Subresource, Namespace: e.Namespace, Name: e.Name, Path: e.Path,
		}
	}
	r.User, r.Groups, r.UserAgent = e.User, e.Groups, e.UserAgent
	if e.Proxy != "" {
		r.User, r.Groups = e.Proxy, e.ProxyGroups
		r.Impersonated = &authenticationv1.UserInfo{Username: e.User, Groups: e.Groups}
	}
	return r
}

// methodOf is the HTTP method of an audit verb, for the classifier.
func methodOf(verb string) string {
	switch verb {
	case "create":
		return http.MethodPost
	case "update":
		return http.MethodPut
	case "patch", "apply":
		return http.MethodPatch
	case "delete", "deletecollection":
		return http.MethodDelete
	}
	return http.MethodGet
}

// WriteReplay writes the replay's outcome as text.
func WriteReplay(w io.Writer, r ReplayResult) {
	fmt.Fprintf(w, "%d requests replayed, %d would have been refused; %d matched no policy\n", r.Requests, r.Refused, r.Unmatched)
	for _, c := range r.Clients {
		if c.Refused == 0 {
			continue
		}
		fmt.Fprintf(w, "\nREFUSED %s (%s, %s%s): %d of %d requests, in %d seconds between %s and %s\n",
			c.User, c.UserAgent, c.Kind, via(c.Proxy), c.Refused, c.Requests, c.RefusedSeconds, c.FirstRefused.UTC().Format("15:04:05"), c.LastRefused.UTC().Format("15:04:05"))
		reasons := make([]string, 0, len(c.ByReason))
		for k := range c.ByReason {
			reasons = append(reasons, k)
		}
		slices.Sort(reasons)
		for _, k := range reasons {
			fmt.Fprintf(w, "  %s: %d\n", k, c.ByReason[k])
		}
		fmt.Fprintf(w, "  first refusal: %s\n", c.FirstMessage)
	}
	never := 0
	for _, c := range r.Clients {
		if c.Refused == 0 {
			never++
		}
	}
	fmt.Fprintf(w, "\n%d clients never refused\n", never)
	for _, p := range r.Policies {
		fmt.Fprintf(w, "policy %s: matched %d, refused %d, exempted %d\n", p.Policy, p.Matched, p.Refused, p.Exempted)
	}
}

type entryHeap []Entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].Time.Before(h[j].Time) }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(Entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type release struct {
	at   time.Time
	done func()
}

type releaseHeap []release

func (h releaseHeap) Len() int           { return len(h) }
func (h releaseHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h releaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *releaseHeap) Push(x any)        { *h = append(*h, x.(release)) }
func (h *releaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// via names the proxy of an impersonated client.
func via(proxy string) string {
	if proxy == "" {
		return ""
	}
	return ", via " + proxy
}
