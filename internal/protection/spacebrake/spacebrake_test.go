package spacebrake

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/plumbing/verdict"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func report(share float64, level space.Level, at time.Time) *space.Report {
	const quota = 2 << 30
	return &space.Report{
		Verdict: space.Verdict{Level: level, Share: share, Fullest: space.Member{Name: "etcd-0", DBSize: int64(share * quota), Quota: quota}},
		Written: []space.Grown{{Prefix: "/registry/configmaps/spam/", Bytes: 300 << 20}, {Prefix: "/registry/events/app/", Bytes: 20 << 20}},
		At:      at, Every: 30 * time.Second,
	}
}

func TestAssess(t *testing.T) {
	old := report(0.95, space.Warning, now.Add(-91*time.Second))
	legacy := report(0.95, space.Warning, time.Time{})
	legacy.Space.At, legacy.Every = now.Add(-time.Minute), 0
	for _, c := range []struct {
		name  string
		r     Reading
		share float64
		on    bool
		open  Open
	}{
		{"at the share", Reading{Synced: true, Report: report(0.9, space.Warning, now)}, 0.9, true, Usable},
		{"past it", Reading{Synced: true, Report: report(0.97, space.Warning, now.Add(-80*time.Second))}, 0.9, true, Usable},
		{"under it", Reading{Synced: true, Report: report(0.89, space.Warning, now)}, 0.9, false, Usable},
		{"NOSPACE whatever the share (defragmented, not disarmed)", Reading{Synced: true, Report: report(0.2, space.NoSpace, now)}, 0.9, true, Usable},
		{"brake off", Reading{Synced: true, Report: report(0.99, space.NoSpace, now)}, 0, false, Off},
		{"not read yet", Reading{}, 0.9, false, Unsynced},
		{"no report", Reading{Synced: true}, 0.9, false, Absent},
		{"unreadable", Reading{Synced: true, Err: errors.New("invalid character")}, 0.9, false, Unreadable},
		{"the look failed", Reading{Synced: true, Report: &space.Report{Error: "etcd unreachable", At: now}}, 0.9, false, Unmeasured},
		{"older than 3 intervals", Reading{Synced: true, Report: old}, 0.9, false, Stale},
		{"no interval: 3 × 30s, by the measure's time", Reading{Synced: true, Report: legacy}, 0.9, true, Usable},
	} {
		st := Assess(c.r, c.share, now)
		if st.On != c.on || st.Open != c.open {
			t.Errorf("%s: on %v open %q, want on %v open %q", c.name, st.On, st.Open, c.on, c.open)
		}
	}
}

func TestCreates(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Request
		want bool
	}{
		{"a ConfigMap", Request{Verb: "create", Resource: "configmaps", Namespace: "app"}, true},
		{"an Event", Request{Verb: "create", Resource: "events", Namespace: "app"}, true},
		{"an events.k8s.io Event", Request{Verb: "create", APIGroup: "events.k8s.io", Resource: "events", Namespace: "app"}, true},
		{"a namespace", Request{Verb: "create", Resource: "namespaces"}, true},
		{"a dry run", Request{Verb: "create", Resource: "configmaps", Namespace: "app", DryRun: true}, false},
		{"an update", Request{Verb: "update", Resource: "configmaps", Namespace: "app"}, false},
		{"a patch", Request{Verb: "patch", Resource: "configmaps", Namespace: "app"}, false},
		{"a delete", Request{Verb: "delete", Resource: "configmaps", Namespace: "app"}, false},
		{"a deletecollection", Request{Verb: "deletecollection", Resource: "events", Namespace: "app"}, false},
		{"a get", Request{Verb: "get", Resource: "configmaps", Namespace: "app"}, false},
		{"a watch", Request{Verb: "watch", Resource: "configmaps"}, false},
		{"an eviction (a drain)", Request{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "app"}, false},
		{"a binding (the scheduler)", Request{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "app"}, false},
		{"a legacy binding", Request{Verb: "create", Resource: "bindings", Namespace: "app"}, false},
		{"a token", Request{Verb: "create", Resource: "serviceaccounts", Subresource: "token", Namespace: "app"}, false},
		{"an exec", Request{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "app"}, false},
		{"a TokenReview", Request{Verb: "create", APIGroup: "authentication.k8s.io", Resource: "tokenreviews"}, false},
		{"a SubjectAccessReview", Request{Verb: "create", APIGroup: "authorization.k8s.io", Resource: "subjectaccessreviews"}, false},
		{"a SelfSubjectAccessReview (kubectl auth can-i)", Request{Verb: "create", APIGroup: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}, false},
		{"a SelfSubjectReview (kubectl auth whoami)", Request{Verb: "create", APIGroup: "authentication.k8s.io", Resource: "selfsubjectreviews"}, false},
	} {
		if got := Creates(c.r); got != c.want {
			t.Errorf("%s: Creates = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestExempt(t *testing.T) {
	const ns = "rampart-system"
	cm := func(user string, groups ...string) Request {
		return Request{Verb: "create", Resource: "configmaps", Namespace: "app", User: user, Groups: groups}
	}
	for _, c := range []struct {
		name string
		r    Request
		want bool
	}{
		{"a user", cm("alice", "system:authenticated"), false},
		{"a service account elsewhere", cm("system:serviceaccount:app:op", "system:serviceaccounts", "system:serviceaccounts:app"), false},
		{"a service account named like kube-system's", cm("system:serviceaccount:kube-systemx:op", "system:serviceaccounts:kube-systemx"), false},
		{"a kubelet", cm("system:node:n1", "system:nodes"), true},
		{"a node by its group alone", cm("n1", "system:nodes"), true},
		{"the controller manager", cm("system:kube-controller-manager"), true},
		{"a controller's service account (the garbage collector)", cm("system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system"), true},
		{"the scheduler", cm("system:kube-scheduler"), true},
		{"a kubelet bootstrapping", cm("system:bootstrap:abcdef", "system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"), true},
		{"Rampart's manager", cm("system:serviceaccount:rampart-system:rampart-manager", "system:serviceaccounts:rampart-system"), true},
		{"Rampart's manager impersonated without its groups", cm("system:serviceaccount:rampart-system:rampart-manager"), true},
		{"a user named exempt", cm("rampart-manager"), true},
		{"anyone in Rampart's namespace (helm's release record)", Request{Verb: "create", Resource: "secrets", Namespace: ns, User: "alice"}, true},
		{"anyone's lease", Request{Verb: "create", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "app", User: "alice"}, true},
		{"anyone's lease candidate", Request{Verb: "create", APIGroup: "coordination.k8s.io", Resource: "leasecandidates", Namespace: "app", User: "alice"}, true},
	} {
		if got := Exempt(c.r, ns, []string{"rampart-manager"}); got != c.want {
			t.Errorf("%s: Exempt = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDecide(t *testing.T) {
	on := Assess(Reading{Synced: true, Report: report(0.93, space.Warning, now)}, 0.9, now)
	stale := Assess(Reading{Synced: true, Report: report(0.93, space.Warning, now.Add(-time.Hour))}, 0.9, now)
	user := Request{Verb: "create", Resource: "configmaps", Namespace: "app", User: "alice"}
	if v := Decide(on, user, "rampart-system", nil); v.Allowed || v.Refusal != verdict.Throttled || v.Reason != Reason || v.RetryAfter != 0 {
		t.Fatalf("a user's create while braking: %+v, want refused 429 without Retry-After", v)
	} else {
		for _, want := range []string{"etcd-0", "93%", "2048.0 MiB quota", "from 90%", "/registry/configmaps/spam/ (300.0 MiB)", "/registry/events/app/", "rampart etcd space recover --dir DIR"} {
			if !strings.Contains(v.Message, want) {
				t.Errorf("the refusal %q does not say %q", v.Message, want)
			}
		}
	}
	update := user
	update.Verb = "update"
	node := user
	node.User, node.Groups = "system:node:n1", []string{"system:nodes"}
	for name, c := range map[string]struct {
		st State
		r  Request
	}{
		"an update while braking":  {on, update},
		"a node's create":          {on, node},
		"a create, the report old": {stale, user},
	} {
		if v := Decide(c.st, c.r, "rampart-system", nil); !v.Allowed {
			t.Errorf("%s: refused: %s", name, v.Message)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	on := Assess(Reading{Synced: true, Report: report(0.93, space.Warning, now)}, 0.9, now)
	r := Request{Verb: "create", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", User: "system:node:n1", Groups: []string{"system:nodes"}}
	for b.Loop() {
		Decide(on, r, "rampart-system", nil)
	}
}
