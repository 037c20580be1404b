package trafficprofile

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// Precedences of suggested policies: the control plane's exemption
// first, then each client's own limits, then one for every client the
// profile did not see.
const (
	suggestExemptPrecedence = 100
	suggestClientPrecedence = 1000
	suggestOthersPrecedence = 9000
)

// SuggestOptions size suggested policies.
type SuggestOptions struct {
	// Margin is added to each observed peak: 0.2 is 20%.
	Margin float64
	// Prefix starts every policy's name.
	Prefix string
	// Gateways are the users Rampart's gateways reach the API server as:
	// they impersonate every client they forward, and a gateway's
	// policies see that client as itself, not as impersonated.
	Gateways []string
}

// Suggest writes TrafficPolicies sized from the clients of r: for each
// client (user and user agent) that is not the control plane's, a limit
// of its peak requests per second plus the margin, and a tighter one on
// its LISTs (its peak LISTs per second plus the margin, and its peak
// LIST objects per second where the log counts them); for any client the
// profile did not see, the largest of those limits; the control plane's
// own components exempt. Applied to the traffic r was made from, no
// client is refused; sized from a calm period (a baseline), a client
// that later sends far more than it ever did, or a newcomer sending more
// than any client did, is.
func Suggest(r Report, o SuggestOptions) []v1alpha1.TrafficPolicy {
	if o.Prefix == "" {
		o.Prefix = "suggested"
	}
	up := func(n int64) int32 { return int32(min(math.Ceil(float64(max(n, 1))*(1+o.Margin)), 1e6)) }
	policies := []v1alpha1.TrafficPolicy{policy(o.Prefix+"-control-plane", "the control plane's own components: never limited", v1alpha1.TrafficPolicySpec{
		Precedence: suggestExemptPrecedence,
		Action:     v1alpha1.ActionExempt,
		Match: []v1alpha1.TrafficMatch{
			{Subjects: v1alpha1.Subjects{Users: append(append([]string{}, controlPlaneUsers...), "system:kube-proxy")}},
			{Subjects: v1alpha1.Subjects{Groups: []string{"system:serviceaccounts:kube-system", "system:nodes"}}},
		},
	})}
	var maxPeak, maxLists, maxObjects int64
	n := 0
	// Clients behind an impersonating proxy come first: the gateway sees
	// the proxy as the client, and a policy for the proxy's own requests
	// would otherwise hold them too.
	clients := slices.Clone(r.Clients)
	behind := func(c *ClientProfile) bool { return c.Proxy != "" && !slices.Contains(o.Gateways, c.Proxy) }
	slices.SortStableFunc(clients, func(a, b ClientProfile) int {
		switch {
		case behind(&a) && !behind(&b):
			return -1
		case behind(&b) && !behind(&a):
			return 1
		}
		return 0
	})
	for i := range clients {
		c := &clients[i]
		if Exempt(c.Kind) || c.User == OtherClients {
			continue
		}
		maxPeak, maxLists, maxObjects = max(maxPeak, c.PeakPerSecond), max(maxLists, c.PeakListsPerSecond), max(maxObjects, c.PeakListObjectsPerSecond)
		match := []v1alpha1.TrafficMatch{{Subjects: v1alpha1.Subjects{Users: []string{c.User}}}}
		who := c.User
		if behind(c) {
			// As the gateway matches it: the proxy it authenticates,
			// narrowed to the user the proxy impersonates.
			match[0] = v1alpha1.TrafficMatch{Subjects: v1alpha1.Subjects{Users: []string{c.Proxy}}, Impersonated: &v1alpha1.Subjects{Users: []string{c.User}}}
			who = c.User + " via " + c.Proxy
		}
		if c.UserAgent != "" && !strings.Contains(c.UserAgent, "*") {
			match[0].UserAgents = []string{c.UserAgent}
		}
		name := fmt.Sprintf("%s-%s", o.Prefix, slug(c.User, n))
		why := fmt.Sprintf("%s (%s): peak %d requests/s at %s", who, c.UserAgent, c.PeakPerSecond, c.PeakAt.Format("15:04:05"))
		if c.Lists > 0 {
			lm := []v1alpha1.TrafficMatch{match[0]}
			lm[0].Verbs = []string{"list"}
			spec := v1alpha1.TrafficPolicySpec{
				Precedence: int32(suggestClientPrecedence + 2*n), Action: v1alpha1.ActionLimit, Match: lm,
				Limit: rateLimit(up(c.PeakListsPerSecond)),
			}
			if c.PeakListObjectsPerSecond > 0 {
				spec.List = &v1alpha1.TrafficListGuard{ObjectsPerSecond: ptr.To(up(c.PeakListObjectsPerSecond))}
			}
			policies = append(policies, policy(name+"-lists", fmt.Sprintf("%s; peak %d LISTs/s, %d LIST objects/s", why, c.PeakListsPerSecond, c.PeakListObjectsPerSecond), spec))
		}
		policies = append(policies, policy(name, why, v1alpha1.TrafficPolicySpec{
			Precedence: int32(suggestClientPrecedence + 2*n + 1), Action: v1alpha1.ActionLimit, Match: match,
			Limit: rateLimit(up(c.PeakPerSecond)),
		}))
		n++
		if suggestClientPrecedence+2*n+1 >= suggestOthersPrecedence {
			break // the rest are sized by the policy for the others
		}
	}
	if n == 0 {
		return policies
	}
	others := v1alpha1.TrafficPolicySpec{
		Precedence: suggestOthersPrecedence + 1, Action: v1alpha1.ActionLimit,
		Match: []v1alpha1.TrafficMatch{{}}, Limit: rateLimit(up(maxPeak)),
	}
	others.Limit.Key, others.Limit.FairShare = v1alpha1.KeyUser, ""
	otherLists := v1alpha1.TrafficPolicySpec{
		Precedence: suggestOthersPrecedence, Action: v1alpha1.ActionLimit,
		Match: []v1alpha1.TrafficMatch{{Verbs: []string{"list"}}}, Limit: rateLimit(up(maxLists)),
	}
	otherLists.Limit.Key, otherLists.Limit.FairShare = v1alpha1.KeyUser, ""
	if maxObjects > 0 {
		otherLists.List = &v1alpha1.TrafficListGuard{ObjectsPerSecond: ptr.To(up(maxObjects))}
	}
	return append(policies,
		policy(o.Prefix+"-others-lists", fmt.Sprintf("each client not profiled: the largest peak of the profiled ones, %d LISTs/s", maxLists), otherLists),
		policy(o.Prefix+"-others", fmt.Sprintf("each client not profiled: the largest peak of the profiled ones, %d requests/s", maxPeak), others))
}

// rateLimit is a limit of qps, at least a peak per calendar second,
// with a burst of twice that. Peaks are counted per calendar second, and
// a client's busiest second of wall time can straddle two of them: any
// stretch of T seconds holds at most peak×(T+2) requests, and a bucket of
// rate qps ≥ peak and burst 2×qps admits 2×qps + qps×T of them. With a
// burst of qps alone, a client that sent its peak at the end of one
// second and again at the start of the next was refused in the replay of
// the very calm its limit was sized from (TestTrafficProfileOfListStorm,
// once in three make test runs).
func rateLimit(qps int32) *v1alpha1.TrafficLimit {
	return &v1alpha1.TrafficLimit{QPS: ptr.To(qps), Burst: ptr.To(min(2*qps, 1e6)), Key: v1alpha1.KeyPolicy, FairShare: v1alpha1.FairShareNone}
}

func policy(name, why string, spec v1alpha1.TrafficPolicySpec) v1alpha1.TrafficPolicy {
	return v1alpha1.TrafficPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrafficPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "rampart-traffic-suggest"},
			Annotations: map[string]string{"rampart.io/suggested-from": why},
		},
		Spec: spec,
	}
}

var notName = regexp.MustCompile(`[^a-z0-9-]+`)

// slug makes a policy name from a user: lowercase letters, digits and
// dashes, unique by its index.
func slug(user string, i int) string {
	s := strings.Trim(notName.ReplaceAllString(strings.ToLower(user), "-"), "-")
	if len(s) > 40 {
		s = strings.Trim(s[len(s)-40:], "-")
	}
	return fmt.Sprintf("%s-%d", s, i)
}

// WritePolicies writes policies as YAML documents, ready for kubectl
// apply and for `rampart traffic check`.
func WritePolicies(w io.Writer, policies []v1alpha1.TrafficPolicy) error {
	docs := make([]any, len(policies))
	for i := range policies {
		docs[i] = policies[i]
	}
	return WriteDocuments(w, docs)
}

// WriteDocuments writes API objects as YAML documents, without the empty
// status and creation time a typed object would carry.
func WriteDocuments(w io.Writer, objects []any) error {
	for i, p := range objects {
		raw, err := json.Marshal(p)
		if err != nil {
			return err
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return err
		}
		delete(doc, "status")
		if meta, ok := doc["metadata"].(map[string]any); ok {
			delete(meta, "creationTimestamp")
		}
		out, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w, "---")
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
	}
	return nil
}
