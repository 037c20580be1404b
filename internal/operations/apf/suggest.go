package apf

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

// Matching precedences of the suggested schemas, placed among the
// built-in ones: after the control plane's (exempt 1, probes 2,
// leader-election 100, node-high 400, system-nodes 500,
// kube-controller-manager and kube-scheduler 800, kube-system service
// accounts 900), before service-accounts (9000) and global-default (9900).
const (
	heavyListsPrecedence = 1000
	usersPrecedence      = 9800
)

// SuggestOptions size suggested objects.
type SuggestOptions struct {
	// Margin is added to each measured peak: 0.2 is 20%.
	Margin float64
	// Prefix starts every object's name ("rampart" when empty).
	Prefix string
	// ServerSeats is one API server's concurrency limit (DefaultServerSeats
	// when 0): --max-requests-inflight plus --max-mutating-requests-inflight.
	ServerSeats int
	// HeavyListSeats: a client whose LISTs held at least this many seats
	// at once (a LIST of 100 objects holds one) is a heavy lister (3 when 0).
	HeavyListSeats int64
	// HeavyLevelSeats caps the heavy listers' level (none but half the
	// server when 0; see StormHeavyLevelSeats).
	HeavyLevelSeats int64
}

// StormHeavyLevelSeats is what HeavyLevelSeats should be when the
// profile is of a LIST storm rather than of calm traffic (no
// --baseline-until to size from): three LISTs at a time. Measured in a
// storm, the heavy listers' peak is the storm (a Metadata-level audit
// log, the usual one, shows each LIST as one seat). Nor does a bigger
// level buy fewer LISTs at once: the API server prices a LIST at one seat
// per 100 objects but caps a request's seats at 15% of its level's limit
// (k8s.io/apiserver apf_controller.go, priorityLevelMaxSeatsPercent), so
// any level runs six or seven of the widest LISTs at once; only a level
// of a few seats, each LIST holding one, bounds them to that few.
// Measured by the list-storm-apf drill on a 2-core API server (24 workers
// LISTing 10,000 pods): 31 seats let six at once through, business p50
// 2.4 s; 12 seats, six, p50 1.0 s; 3 seats, three, p50 0.3 s and p99
// 0.7 s, with more LISTs served than with no level at all.
const StormHeavyLevelSeats = 3

// Suggestion is the objects to apply and why each choice was made.
type Suggestion struct {
	Levels  []*flowcontrolv1.PriorityLevelConfiguration
	Schemas []*flowcontrolv1.FlowSchema
	// Notes say what is left to the built-in configuration, and why.
	Notes []string
}

// Suggest writes FlowSchemas and priority levels from a profile.
//
// The control plane, nodes and leader-election leases are left on the
// levels every API server creates (exempt, system, node-high,
// leader-election, workload-high): those schemas already match them by
// user, group and resource and size their levels for them, and the API
// server keeps them up to date; a copy would only drift. Clients whose
// LISTs held HeavyListSeats or more at once (never the control plane's)
// get a level of their own, sized from their measured peak seats plus the
// margin, which may not borrow beyond it: in a LIST storm they queue
// behind each other, fairly by user, instead of taking the seats of
// everyone else. The rest stay fair-shared by user: users on
// global-default, service accounts on workload-low (both distinguish
// flows ByUser); only when the profile's users needed more seats at once
// than global-default has is a level of their own written.
func Suggest(r trafficprofile.Report, o SuggestOptions) Suggestion {
	if o.Prefix == "" {
		o.Prefix = "rampart"
	}
	if o.ServerSeats <= 0 {
		o.ServerSeats = DefaultServerSeats
	}
	if o.HeavyListSeats <= 0 {
		o.HeavyListSeats = 3
	}
	if o.HeavyLevelSeats <= 0 {
		o.HeavyLevelSeats = int64(o.ServerSeats / 2)
	}
	up := func(n int64) int64 { return int64(math.Ceil(float64(max(n, 1)) * (1 + o.Margin))) }
	var s Suggestion
	s.Notes = append(s.Notes,
		"The control plane, nodes and leases stay on the built-in levels (exempt, system, node-high, leader-election, workload-high): the API server's own schemas match them by user, group and resource, and it keeps them up to date; a copy would drift.",
		fmt.Sprintf("Levels are sized for one API server of %d seats (--max-requests-inflight + --max-mutating-requests-inflight); seats are APF's: a LIST holds one per 100 objects, up to 10.", o.ServerSeats))

	var heavy []*trafficprofile.ClientProfile
	var heavySeats, heavyInFlight int64
	var users, userSeats int64
	builtin := Builtin()
	for i := range r.Clients {
		c := &r.Clients[i]
		if trafficprofile.Exempt(c.Kind) || c.User == trafficprofile.OtherClients {
			continue
		}
		if c.PeakListSeats >= o.HeavyListSeats {
			if !slices.ContainsFunc(heavy, func(h *trafficprofile.ClientProfile) bool { return h.User == c.User }) {
				heavy = append(heavy, c)
			}
			heavySeats += c.PeakListSeats
			heavyInFlight = max(heavyInFlight, c.PeakListsInFlight)
			continue
		}
		if _, l := builtin.Classify(Request{User: c.User, Groups: c.Groups, IsResource: true, Verb: "get", Resource: "pods", Namespace: "default"}); l != nil && l.Name == "global-default" {
			users++
			userSeats += c.PeakSeats
		}
	}

	cfg := Builtin()
	if len(heavy) > 0 {
		seats := min(up(heavySeats), o.HeavyLevelSeats, int64(o.ServerSeats/2))
		names := make([]string, len(heavy))
		subjects := make([]flowcontrolv1.Subject, len(heavy))
		for i, c := range heavy {
			names[i], subjects[i] = c.User, subject(c.User)
		}
		queues := int32(min(max(4, 2*len(heavy)), 64))
		level := &flowcontrolv1.PriorityLevelConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "PriorityLevelConfiguration"},
			ObjectMeta: meta(o.Prefix+"-heavy-lists", fmt.Sprintf("LISTs of %s: %d seats at once at peak (the sum of each one's peak)", strings.Join(names, ", "), heavySeats)),
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
				Type: flowcontrolv1.PriorityLevelEnablementLimited,
				Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
					LendablePercent:       ptr.To[int32](50),
					BorrowingLimitPercent: ptr.To[int32](0),
					LimitResponse: flowcontrolv1.LimitResponse{
						Type: flowcontrolv1.LimitResponseTypeQueue,
						Queuing: &flowcontrolv1.QueuingConfiguration{
							Queues: queues, HandSize: min(2, queues),
							QueueLengthLimit: int32(min(max(up(heavyInFlight), 5), 128)),
						},
					},
				},
			},
		}
		level.Spec.Limited.NominalConcurrencyShares = ptr.To(sharesFor(cfg, seats, o.ServerSeats))
		schema := &flowcontrolv1.FlowSchema{
			TypeMeta:   metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "FlowSchema"},
			ObjectMeta: meta(o.Prefix+"-heavy-lists", "the LISTs of the clients whose LISTs held the most seats at once; their other requests stay where they were"),
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level.Name},
				MatchingPrecedence:         heavyListsPrecedence,
				DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects: subjects,
					ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
						Verbs: []string{"list"}, APIGroups: []string{"*"}, Resources: []string{"*"},
						ClusterScope: true, Namespaces: []string{"*"},
					}},
				}},
			},
		}
		cfg.Add([]*flowcontrolv1.FlowSchema{schema}, []*flowcontrolv1.PriorityLevelConfiguration{level})
		s.Levels, s.Schemas = append(s.Levels, level), append(s.Schemas, schema)
		s.Notes = append(s.Notes, fmt.Sprintf("%s: their LISTs get %d seats (their peak %d plus %.0f%%, at most %d), queued fairly by user, lending half when idle and never borrowing.",
			strings.Join(names, ", "), cfg.NominalSeats(o.ServerSeats)[level.Name], heavySeats, 100*o.Margin, o.HeavyLevelSeats))
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("No client's LISTs held %d seats at once: no heavy lister to isolate.", o.HeavyListSeats))
	}

	have := cfg.NominalSeats(o.ServerSeats)["global-default"]
	if need := up(userSeats); users > 0 && need > int64(have) {
		level := &flowcontrolv1.PriorityLevelConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "PriorityLevelConfiguration"},
			ObjectMeta: meta(o.Prefix+"-users", fmt.Sprintf("%d users not of the control plane: %d seats at once at peak (the sum of each one's peak)", users, userSeats)),
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
				Type: flowcontrolv1.PriorityLevelEnablementLimited,
				Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
					LendablePercent: ptr.To[int32](50),
					LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{
						Queues: 128, HandSize: 6, QueueLengthLimit: 50,
					}},
				},
			},
		}
		level.Spec.Limited.NominalConcurrencyShares = ptr.To(sharesFor(cfg, need, o.ServerSeats))
		schema := &flowcontrolv1.FlowSchema{
			TypeMeta:   metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "FlowSchema"},
			ObjectMeta: meta(o.Prefix+"-users", "authenticated users that no earlier schema matched (service accounts are matched earlier), fair-shared by user"),
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level.Name},
				MatchingPrecedence:         usersPrecedence,
				DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "system:authenticated"}}},
					ResourceRules:    []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true, Namespaces: []string{"*"}}},
					NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
				}},
			},
		}
		cfg.Add([]*flowcontrolv1.FlowSchema{schema}, []*flowcontrolv1.PriorityLevelConfiguration{level})
		s.Levels, s.Schemas = append(s.Levels, level), append(s.Schemas, schema)
		s.Notes = append(s.Notes, fmt.Sprintf("The other users needed %d seats at once, more than global-default's %d: they get a level of %d seats, fair-shared by user.",
			userSeats, have, cfg.NominalSeats(o.ServerSeats)[level.Name]))
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("The other clients stay fair-shared by user on the built-in levels: users on global-default (%d seats; their peaks sum to %d), service accounts on workload-low.", have, userSeats))
	}
	return s
}

// sharesFor is the nominalConcurrencyShares that gives a new level at
// least seats of serverSeats beside the levels of cfg.
func sharesFor(cfg *Config, seats int64, serverSeats int) int32 {
	var others int64
	for _, l := range cfg.Levels {
		others += int64(Shares(l))
	}
	seats = min(seats, int64(serverSeats)-1)
	shares := max(1, int64(math.Ceil(float64(seats)*float64(others)/float64(int64(serverSeats)-seats))))
	// The API server rounds a level's seats up: fewer shares may do.
	nominal := func(s int64) int64 { return int64(math.Ceil(float64(serverSeats) * float64(s) / float64(others+s))) }
	for shares > 1 && nominal(shares-1) >= seats {
		shares--
	}
	return int32(shares)
}

// subject names a user, or a service account as one.
func subject(user string) flowcontrolv1.Subject {
	if sa, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(sa, ":"); ok {
			return flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindServiceAccount, ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: ns, Name: name}}
		}
	}
	return flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}
}

func meta(name, why string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{"app.kubernetes.io/managed-by": "rampart-traffic-suggest"},
		Annotations: map[string]string{"rampart.io/suggested-from": why},
	}
}

// Write writes the suggestion as YAML: the notes as comments, then the
// levels before the schemas that name them.
func Write(w io.Writer, s Suggestion) error {
	for _, n := range s.Notes {
		fmt.Fprintf(w, "# %s\n", n)
	}
	var docs []any
	for _, l := range s.Levels {
		docs = append(docs, l)
	}
	for _, f := range s.Schemas {
		docs = append(docs, f)
	}
	if len(docs) == 0 {
		fmt.Fprintln(w, "# Nothing to apply: the built-in configuration fits this profile.")
		return nil
	}
	return trafficprofile.WriteDocuments(w, docs)
}
