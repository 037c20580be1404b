// Package spacebrake decides the gateway's etcd-space brake: while the
// fullest etcd member is at or past a share of its quota (or NOSPACE is
// raised), creates from clients outside the control plane are refused, so
// that what keeps the cluster alive (leases, node and pod status, deletes,
// evictions) still fits in the space left while an operator recovers it.
//
// The brake reads the manager's published look at etcd's space
// (space.Report) and fails open: no report, an unreadable one, one that
// measured nothing, or one older than a few of the manager's intervals
// leaves every request alone. Assess reads the report at a moment; Decide
// judges one request against that reading. Both are pure.
package spacebrake

import (
	"fmt"
	"strings"
	"time"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

// DefaultShare is the share of the quota from which the brake holds: past
// the alert's 80%, short of etcd's NOSPACE at 100%.
const DefaultShare = 0.9

// DefaultEvery is the manager's default --etcd-space-every, for a report
// that does not say how often it is renewed.
const DefaultEvery = 30 * time.Second

// StaleAfter is how many of the manager's intervals a report stays
// usable: a leader that stopped publishing (none elected, or etcd refusing
// its writes) must not hold the brake for ever.
const StaleAfter = 3

// Reason is the rejections' reason label.
const Reason = "etcd-space"

// Open says why the brake does not hold; "" when the report is usable.
type Open string

const (
	// Usable: the report is read; the brake holds if its share says so.
	Usable Open = ""
	// Off: the brake's share is 0.
	Off Open = "off"
	// Unsynced: the gateway has not read the ConfigMap yet (or may not).
	Unsynced Open = "unsynced"
	// Absent: no ConfigMap, or no report in it.
	Absent Open = "absent"
	// Unreadable: the report is not a report.
	Unreadable Open = "unreadable"
	// Unmeasured: the leader could not measure etcd in its last look.
	Unmeasured Open = "unmeasured"
	// Stale: older than StaleAfter of the manager's intervals.
	Stale Open = "stale"
)

// Opens are the reasons the brake fails open, for metrics.
var Opens = []Open{Unsynced, Absent, Unreadable, Unmeasured, Stale}

// Reading is the ConfigMap as the gateway last saw it.
type Reading struct {
	// Synced is set once the gateway's watch has listed the ConfigMap.
	Synced bool
	// Report is nil when there is no ConfigMap or no report in it.
	Report *space.Report
	// Err is why the report could not be decoded.
	Err error
}

// State is the brake at a moment.
type State struct {
	// On: creates from outside the control plane are refused.
	On bool
	// Open is why the brake fails open (Usable when the report is read).
	Open   Open
	Share  float64
	Report *space.Report
}

// Assess reads the brake's state at now: on while the report is fresh and
// the fullest member is at or past share of its quota, or NOSPACE is
// raised. share 0 turns the brake off.
func Assess(r Reading, share float64, now time.Time) State {
	st := State{Share: share, Report: r.Report}
	switch {
	case share <= 0:
		st.Open = Off
	case !r.Synced:
		st.Open = Unsynced
	case r.Err != nil:
		st.Open = Unreadable
	case r.Report == nil:
		st.Open = Absent
	case !r.Report.Measured():
		st.Open = Unmeasured
	case now.Sub(r.Report.Taken()) > StaleAfter*every(r.Report):
		st.Open = Stale
	default:
		v := r.Report.Verdict
		st.On = v.Share >= share || v.Level == space.NoSpace
	}
	return st
}

func every(r *space.Report) time.Duration {
	if r.Every > 0 {
		return r.Every
	}
	return DefaultEvery
}

// Request is what the brake reads of a request: what it does, and whom it
// acts as (the user the API server will authorize: the impersonated one,
// if any).
type Request struct {
	Verb, APIGroup, Resource, Subresource, Namespace string
	// DryRun: the request persists nothing (?dryRun=All).
	DryRun bool
	User   string
	Groups []string
}

// Creates says whether the request adds an object to etcd: a POST of a new
// object (verb create) to a resource that is stored. Subresources are not
// (pods/eviction deletes a pod; pods/binding, serviceaccounts/token,
// pods/exec write no new object), nor reviews, which are answered and
// forgotten, nor dry runs.
func Creates(r Request) bool {
	if r.Verb != "create" || r.Subresource != "" || r.DryRun {
		return false
	}
	return !unstored[[2]string{r.APIGroup, r.Resource}]
}

// unstored are the resources whose create stores nothing new: reviews,
// and the legacy bindings (a pod's nodeName, written to the pod).
var unstored = map[[2]string]bool{
	{"authentication.k8s.io", "tokenreviews"}:             true,
	{"authentication.k8s.io", "selfsubjectreviews"}:       true,
	{"authorization.k8s.io", "subjectaccessreviews"}:      true,
	{"authorization.k8s.io", "selfsubjectaccessreviews"}:  true,
	{"authorization.k8s.io", "localsubjectaccessreviews"}: true,
	{"authorization.k8s.io", "selfsubjectrulesreviews"}:   true,
	{"", "bindings"}: true,
}

// keepsAlive are the resources whose creates pass whoever sends them:
// leases are every component's heartbeat and leader election (nodes',
// controllers', Rampart's own), and a lease that cannot be taken stops
// the component.
var keepsAlive = map[[2]string]bool{
	{"coordination.k8s.io", "leases"}:          true,
	{"coordination.k8s.io", "leasecandidates"}: true,
}

// Exempt says whether the request passes the brake whatever it is: the
// control plane's components (nodes, the controller manager and its
// controllers' service accounts in kube-system, the scheduler, kubelets
// bootstrapping), Rampart's own service accounts and namespace (its
// manager, gateway and helm's release records), and leases.
// rampartNamespace is Rampart's namespace; exemptUsers are more users to
// exempt (the manager's own identity when it is not a service account).
func Exempt(r Request, rampartNamespace string, exemptUsers []string) bool {
	if keepsAlive[[2]string{r.APIGroup, r.Resource}] {
		return true
	}
	if rampartNamespace != "" && r.Namespace == rampartNamespace {
		return true
	}
	switch {
	case r.User == "system:kube-controller-manager", r.User == "system:kube-scheduler",
		strings.HasPrefix(r.User, "system:node:"),
		strings.HasPrefix(r.User, "system:serviceaccount:kube-system:"),
		rampartNamespace != "" && strings.HasPrefix(r.User, "system:serviceaccount:"+rampartNamespace+":"):
		return true
	}
	for _, u := range exemptUsers {
		if r.User == u {
			return true
		}
	}
	for _, g := range r.Groups {
		switch {
		case g == "system:nodes", g == "system:serviceaccounts:kube-system",
			g == "system:bootstrappers", strings.HasPrefix(g, "system:bootstrappers:"),
			rampartNamespace != "" && g == "system:serviceaccounts:"+rampartNamespace:
			return true
		}
	}
	return false
}

// Decide judges a request while the brake is in state st: a create from a
// client that is not exempt is refused with 429 and no Retry-After, so
// that client-go does not retry it by itself (it retries a 429 only with
// one): kubectl shows the message at once, and a controller backs off in
// its own queue.
func Decide(st State, r Request, rampartNamespace string, exemptUsers []string) verdict.Verdict {
	if !st.On || !Creates(r) || Exempt(r, rampartNamespace, exemptUsers) {
		return verdict.Allow
	}
	return verdict.Verdict{Refusal: verdict.Throttled, Reason: Reason, Message: Message(st)}
}

// Message says why a create is refused, and what to do: the share and the
// quota, the prefixes written most, and the way back.
func Message(st State) string {
	var b strings.Builder
	r := st.Report
	v := r.Verdict
	fmt.Fprintf(&b, "etcd is nearly out of space: its fullest member (%s) holds %s of its %s quota (%.0f%%", v.Fullest.Name, space.MiB(v.Fullest.DBSize), space.MiB(v.Fullest.Quota), 100*v.Share)
	if v.Level == space.NoSpace {
		b.WriteString(", NOSPACE raised")
	}
	fmt.Fprintf(&b, "); the gateway refuses creates from clients outside the control plane from %.0f%% until space is recovered. Updates, deletes, evictions and leases still pass.", 100*st.Share)
	if len(r.Written) > 0 {
		b.WriteString(" Written most since the previous look:")
		for i, g := range r.Written {
			if i == 3 {
				break
			}
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s (%s)", g.Prefix, space.MiB(g.Bytes))
		}
		b.WriteString(".")
	}
	b.WriteString(" Stop what writes there, then: rampart etcd space recover --dir DIR (docs/etcd.md).")
	return b.String()
}
