// Package apf advises on kube-apiserver's API Priority and Fairness: it
// writes FlowSchemas and PriorityLevelConfigurations sized from a traffic
// profile, replays a log against them (which flow schema each request
// matches, what the priority levels would have queued or rejected), and
// reads what a cluster's APF does today.
package apf

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"

	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

// DefaultServerSeats is one kube-apiserver's concurrency limit by default:
// --max-requests-inflight (400) plus --max-mutating-requests-inflight
// (200), which APF shares among the priority levels.
const DefaultServerSeats = 600

// Config is a set of FlowSchemas and priority levels, as one API server
// holds them.
type Config struct {
	// Schemas in the order APF consults them: matchingPrecedence, then name.
	Schemas []*flowcontrolv1.FlowSchema
	Levels  map[string]*flowcontrolv1.PriorityLevelConfiguration
}

// Builtin is the configuration every kube-apiserver creates: the mandatory
// objects and the suggested ones, as k8s.io/apiserver defines them.
func Builtin() *Config {
	c := &Config{Levels: map[string]*flowcontrolv1.PriorityLevelConfiguration{}}
	c.Add(bootstrap.MandatoryFlowSchemas, bootstrap.MandatoryPriorityLevelConfigurations)
	c.Add(bootstrap.SuggestedFlowSchemas, bootstrap.SuggestedPriorityLevelConfigurations)
	return c
}

// Add adds objects, replacing those of the same name (as applying them
// to a cluster would, the built-in ones included).
func (c *Config) Add(schemas []*flowcontrolv1.FlowSchema, levels []*flowcontrolv1.PriorityLevelConfiguration) {
	for _, l := range levels {
		c.Levels[l.Name] = l
	}
	for _, s := range schemas {
		c.Schemas = slices.DeleteFunc(c.Schemas, func(x *flowcontrolv1.FlowSchema) bool { return x.Name == s.Name })
		c.Schemas = append(c.Schemas, s)
	}
	slices.SortStableFunc(c.Schemas, func(a, b *flowcontrolv1.FlowSchema) int {
		return cmp.Or(cmp.Compare(a.Spec.MatchingPrecedence, b.Spec.MatchingPrecedence), strings.Compare(a.Name, b.Name))
	})
}

// ReadObjects reads FlowSchemas and PriorityLevelConfigurations
// (flowcontrol.apiserver.k8s.io/v1) from YAML or JSON documents; none is
// no error.
func ReadObjects(data []byte, name string) ([]*flowcontrolv1.FlowSchema, []*flowcontrolv1.PriorityLevelConfiguration, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var schemas []*flowcontrolv1.FlowSchema
	var levels []*flowcontrolv1.PriorityLevelConfiguration
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, fmt.Errorf("%s, document %d: %w", name, doc, err)
		}
		var tm metav1.TypeMeta
		if len(raw) == 0 || string(raw) == "null" || json.Unmarshal(raw, &tm) == nil && tm.Kind == "" && tm.APIVersion == "" {
			continue // an empty document
		}
		if tm.APIVersion != flowcontrolv1.SchemeGroupVersion.String() {
			return nil, nil, fmt.Errorf("%s, document %d: %s of apiVersion %q: use %s", name, doc, tm.Kind, tm.APIVersion, flowcontrolv1.SchemeGroupVersion)
		}
		kind, j := tm.Kind, []byte(raw)
		switch kind {
		case "FlowSchema":
			var s flowcontrolv1.FlowSchema
			if err := json.Unmarshal(j, &s); err != nil {
				return nil, nil, fmt.Errorf("%s, document %d: %w", name, doc, err)
			}
			schemas = append(schemas, &s)
		case "PriorityLevelConfiguration":
			var l flowcontrolv1.PriorityLevelConfiguration
			if err := json.Unmarshal(j, &l); err != nil {
				return nil, nil, fmt.Errorf("%s, document %d: %w", name, doc, err)
			}
			levels = append(levels, &l)
		default:
			return nil, nil, fmt.Errorf("%s, document %d: a %s, not a FlowSchema or PriorityLevelConfiguration", name, doc, kind)
		}
	}
	// A file of comments alone (a suggestion of nothing) is the built-in
	// configuration.
	return schemas, levels, nil
}

// Request is what a FlowSchema matches: the user the API server
// authorised (an impersonated one, as APF sees it) and the request.
type Request struct {
	User       string
	Groups     []string
	IsResource bool
	Verb       string
	APIGroup   string
	Resource   string
	// Subresource, Namespace; Path for a non-resource request.
	Subresource string
	Namespace   string
	Path        string
}

// RequestOf is the request of a log entry.
func RequestOf(e *trafficprofile.Entry) Request {
	return Request{User: e.User, Groups: e.Groups, IsResource: e.IsResource(), Verb: e.Verb, APIGroup: e.APIGroup,
		Resource: e.Resource, Subresource: e.Subresource, Namespace: e.Namespace, Path: e.Path}
}

// Classify returns the flow schema r matches first and its priority
// level; a schema whose level does not exist is passed over, as APF
// passes it. Matching is kube-apiserver's (k8s.io/apiserver/pkg/util/
// flowcontrol, rule.go), rewritten because it is not exported;
// TestSuggestedAPFOnARealAPIServer holds it to the API server's answers.
func (c *Config) Classify(r Request) (*flowcontrolv1.FlowSchema, *flowcontrolv1.PriorityLevelConfiguration) {
	for _, s := range c.Schemas {
		l := c.Levels[s.Spec.PriorityLevelConfiguration.Name]
		if l == nil {
			continue
		}
		for i := range s.Spec.Rules {
			if ruleMatches(&s.Spec.Rules[i], r) {
				return s, l
			}
		}
	}
	return nil, nil
}

// Flow is the flow of r under s: its schema and distinguisher.
func Flow(s *flowcontrolv1.FlowSchema, r Request) string {
	if d := s.Spec.DistinguisherMethod; d != nil {
		switch d.Type {
		case flowcontrolv1.FlowDistinguisherMethodByUserType:
			return s.Name + "/" + r.User
		case flowcontrolv1.FlowDistinguisherMethodByNamespaceType:
			return s.Name + "/" + r.Namespace
		}
	}
	return s.Name
}

func ruleMatches(p *flowcontrolv1.PolicyRulesWithSubjects, r Request) bool {
	if !slices.ContainsFunc(p.Subjects, func(s flowcontrolv1.Subject) bool { return subjectMatches(s, r) }) {
		return false
	}
	if r.IsResource {
		return slices.ContainsFunc(p.ResourceRules, func(rr flowcontrolv1.ResourcePolicyRule) bool {
			resource := r.Resource
			if r.Subresource != "" {
				resource += "/" + r.Subresource
			}
			if !has(rr.Verbs, r.Verb, flowcontrolv1.VerbAll) || !has(rr.Resources, resource, flowcontrolv1.ResourceAll) || !has(rr.APIGroups, r.APIGroup, flowcontrolv1.APIGroupAll) {
				return false
			}
			if r.Namespace == "" {
				return rr.ClusterScope
			}
			return has(rr.Namespaces, r.Namespace, flowcontrolv1.NamespaceEvery)
		})
	}
	return slices.ContainsFunc(p.NonResourceRules, func(nr flowcontrolv1.NonResourcePolicyRule) bool {
		if !has(nr.Verbs, r.Verb, flowcontrolv1.VerbAll) {
			return false
		}
		for _, u := range nr.NonResourceURLs {
			if u == flowcontrolv1.NonResourceAll || u == r.Path {
				return true
			}
			prefix := strings.TrimSuffix(u, "*")
			if !strings.HasSuffix(prefix, "/") {
				prefix += "/"
			}
			if strings.HasPrefix(r.Path, prefix) {
				return true
			}
		}
		return false
	})
}

func subjectMatches(s flowcontrolv1.Subject, r Request) bool {
	switch s.Kind {
	case flowcontrolv1.SubjectKindUser:
		return s.User != nil && (s.User.Name == flowcontrolv1.NameAll || s.User.Name == r.User)
	case flowcontrolv1.SubjectKindGroup:
		return s.Group != nil && (s.Group.Name == flowcontrolv1.NameAll || slices.Contains(r.Groups, s.Group.Name))
	case flowcontrolv1.SubjectKindServiceAccount:
		if s.ServiceAccount == nil {
			return false
		}
		prefix := "system:serviceaccount:" + s.ServiceAccount.Namespace + ":"
		if s.ServiceAccount.Name == flowcontrolv1.NameAll {
			return strings.HasPrefix(r.User, prefix)
		}
		return r.User == prefix+s.ServiceAccount.Name
	}
	return false
}

// has is APF's containsString: x is in list, or list is the wildcard.
func has(list []string, x, wildcard string) bool {
	return len(list) == 1 && list[0] == wildcard || slices.Contains(list, x)
}

// Shares is a level's nominalConcurrencyShares, defaulted as the API
// server defaults it (30 for a limited level, 0 for an exempt one).
func Shares(l *flowcontrolv1.PriorityLevelConfiguration) int32 {
	switch {
	case l.Spec.Limited != nil && l.Spec.Limited.NominalConcurrencyShares != nil:
		return *l.Spec.Limited.NominalConcurrencyShares
	case l.Spec.Limited != nil:
		return 30
	case l.Spec.Exempt != nil && l.Spec.Exempt.NominalConcurrencyShares != nil:
		return *l.Spec.Exempt.NominalConcurrencyShares
	}
	return 0
}

// NominalSeats is each limited level's nominal concurrency limit on an
// API server of serverSeats: ceil(serverSeats × shares / all shares).
func (c *Config) NominalSeats(serverSeats int) map[string]int {
	var total int64
	for _, l := range c.Levels {
		total += int64(Shares(l))
	}
	out := map[string]int{}
	for name, l := range c.Levels {
		if l.Spec.Type == flowcontrolv1.PriorityLevelEnablementLimited && total > 0 {
			out[name] = int(math.Ceil(float64(serverSeats) * float64(Shares(l)) / float64(total)))
		}
	}
	return out
}
