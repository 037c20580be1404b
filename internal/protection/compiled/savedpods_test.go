package compiled_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection/compiled"
	"github.com/rampart-io/rampart/internal/protection/compiled/compiledtest"
)

// TestSavedPods runs the node's status writes through the saved-pods
// policy as the API server would: the write turning a protected pod
// Failed is refused only while the node guard's condition says its
// containers run, and only from a node.
func TestSavedPods(t *testing.T) {
	pods := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	node := &user.DefaultInfo{Name: "system:node:real-node-0", Groups: []string{"system:nodes"}}
	type pod struct {
		labelled, deleting bool
		restart            string
		phase              string
		condition          string // ContainersRunning status, "" none
		ready              string // the Ready condition's reason when False, "" Ready=True
	}
	obj := func(p pod) map[string]any {
		var labels map[string]string
		if p.labelled {
			labels = map[string]string{v1alpha1.LabelExplicitDeletion: "true", "app": "gold"}
		}
		o := compiledtest.Object(pods, "shop", "gold-0", labels, nil, nil)
		if p.deleting {
			o["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		}
		spec := map[string]any{"nodeName": "real-node-0"}
		if p.restart != "" {
			spec["restartPolicy"] = p.restart
		}
		o["spec"] = spec
		status := map[string]any{"phase": p.phase}
		if p.phase == "Failed" {
			status["reason"] = "NodeAffinity"
		}
		conds := []any{map[string]any{"type": "Ready", "status": "True"}}
		switch p.ready {
		case "":
		case "dropped": // what the kubelet writes as it rejects a pod
			conds = nil
		default:
			conds = []any{map[string]any{"type": "Ready", "status": "False", "reason": p.ready}}
		}
		if p.condition != "" {
			conds = append(conds, map[string]any{"type": v1alpha1.ConditionContainersRunning, "status": p.condition})
		}
		status["conditions"] = conds
		o["status"] = status
		return o
	}
	saved := pod{labelled: true, restart: "Always", phase: "Running", condition: "True"}
	failed := func(p pod) pod { p.phase = "Failed"; return p }
	with := func(p pod, f func(*pod)) pod { f(&p); return p }
	// What a real kubelet writes for a pod it rejected while the guard
	// keeps its containers: the phase held Running, Ready=False PodFailed.
	unready := func(p pod, reason string) pod { p.ready = reason; return p }
	for _, tc := range []struct {
		name     string
		who      user.Info
		old, new pod
		refused  bool
	}{
		{"the node turns a saved pod Failed", node, saved, failed(saved), true},
		{"restartPolicy unset is Always", node, with(saved, func(p *pod) { p.restart = "" }), with(failed(saved), func(p *pod) { p.restart = "" }), true},
		{"the guard reports no container running", node, with(saved, func(p *pod) { p.condition = "False" }), failed(with(saved, func(p *pod) { p.condition = "False" })), false},
		{"no guard on the node: no condition", node, with(saved, func(p *pod) { p.condition = "" }), failed(with(saved, func(p *pod) { p.condition = "" })), false},
		{"the node cannot vouch in the same write", node, with(saved, func(p *pod) { p.condition = "" }), failed(saved), false},
		{"not labelled", node, with(saved, func(p *pod) { p.labelled = false }), failed(with(saved, func(p *pod) { p.labelled = false })), false},
		{"deleted in the API", node, with(saved, func(p *pod) { p.deleting = true }), failed(with(saved, func(p *pod) { p.deleting = true })), false},
		{"restartPolicy OnFailure", node, with(saved, func(p *pod) { p.restart = "OnFailure" }), failed(with(saved, func(p *pod) { p.restart = "OnFailure" })), false},
		{"restartPolicy Never", node, with(saved, func(p *pod) { p.restart = "Never" }), failed(with(saved, func(p *pod) { p.restart = "Never" })), false},
		{"already Failed", node, failed(saved), failed(saved), false},
		{"Succeeded stays", node, with(saved, func(p *pod) { p.phase = "Succeeded" }), failed(saved), false},
		{"the node keeps it Running", node, saved, saved, false},
		{"not a node", admin, saved, failed(saved), false},
		{"the node marks a saved pod not Ready as failed", node, saved, unready(saved, "PodFailed"), true},
		{"a readiness probe fails", node, saved, unready(saved, "ContainersNotReady"), false},
		{"not Ready as failed already", node, unready(saved, "PodFailed"), unready(saved, "PodFailed"), false},
		{"Ready again", node, unready(saved, "PodFailed"), saved, false},
		{"not Ready as failed, no container running", node, with(saved, func(p *pod) { p.condition = "False" }),
			unready(with(saved, func(p *pod) { p.condition = "False" }), "PodFailed"), false},
		{"not Ready as failed, not labelled", node, with(saved, func(p *pod) { p.labelled = false }),
			unready(with(saved, func(p *pod) { p.labelled = false }), "PodFailed"), false},
		{"not Ready as failed, deleted in the API", node, with(saved, func(p *pod) { p.deleting = true }),
			unready(with(saved, func(p *pod) { p.deleting = true }), "PodFailed"), false},
		{"not Ready as failed, by someone else", admin, saved, unready(saved, "PodFailed"), false},
		{"the node drops a saved pod's Ready (its rejection)", node, saved, unready(saved, "dropped"), true},
		{"no Ready condition before either", node, unready(saved, "dropped"), unready(saved, "dropped"), false},
		{"from dropped to PodFailed", node, unready(saved, "dropped"), unready(saved, "PodFailed"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := compiledtest.Request{Op: admission.Update, GVK: pods, GVR: pods.GroupVersion().WithResource("pods"), Subresource: "status",
				Namespace: "shop", Name: "gold-0", Old: obj(tc.old), Obj: obj(tc.new), User: tc.who}
			got := compiledtest.NewAPIServer(t, cluster...).Admit(t, compiled.LabelRules(compiled.Options{OwnNamespace: own}), r.Attributes())
			if got.Denied != tc.refused {
				t.Fatalf("%s, want refused=%v", got, tc.refused)
			}
			if !got.Denied {
				return
			}
			t.Log(got.Message)
			what := "Failed (NodeAffinity)"
			switch {
			case tc.new.phase == "Failed":
			case tc.new.ready == "dropped":
				what = "not Ready as a failed pod (its Ready condition and container statuses dropped)"
			default:
				what = "not Ready as a failed pod (Ready=False, reason PodFailed)"
			}
			for _, want := range []string{"node real-node-0 may not turn pod \"gold-0\" in namespace \"shop\" " + what,
				"kubectl delete pod -n shop gold-0", "kubectl label pod -n shop gold-0 rampart.io/explicit-deletion-"} {
				if !strings.Contains(got.Message, want) {
					t.Errorf("message %q lacks %q", got.Message, want)
				}
			}
		})
	}
	// In Rampart's own namespace, as every rule.
	r := compiledtest.Request{Op: admission.Update, GVK: pods, GVR: pods.GroupVersion().WithResource("pods"), Subresource: "status",
		Namespace: own, Name: "gold-0", Old: obj(saved), Obj: obj(failed(saved)), User: node}
	if got := compiledtest.NewAPIServer(t, cluster...).Admit(t, compiled.LabelRules(compiled.Options{OwnNamespace: own}), r.Attributes()); got.Denied {
		t.Errorf("in Rampart's namespace: %s", got)
	}
}
