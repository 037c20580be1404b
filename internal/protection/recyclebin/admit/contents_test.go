package admit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// The contents webhooks reach only the namespace controller's deletes in
// the namespaces Rampart protects (by label, or by a ProtectionPolicy over
// namespaces, both of its selectors on the namespace's labels), never
// Rampart's own, and fail open; none without the recycle bin's contents.
func TestContentsWebhooksReachOnlyProtectedNamespaces(t *testing.T) {
	ledgers := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledgers"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:         []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ledger"}},
		Protection:        v1alpha1.ProtectionCascading}}
	configs := &v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "configs"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources: []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}, Protection: v1alpha1.ProtectionCascading}}
	reg := registration().With(ledgers, configs)
	reg.Protections = []rampartadmission.Protection{&Plugin{}}
	if hooks := rampartadmission.ValidatingConfig(reg).Webhooks; len(hooks) != 0 {
		t.Fatalf("with the recycle bin off: %d webhooks, want none", len(hooks))
	}
	reg.RecycleBin = true
	if hooks := rampartadmission.ValidatingConfig(reg).Webhooks; len(hooks) != 0 {
		t.Fatalf("with no contents kept (a cap of 0): %d webhooks, want none", len(hooks))
	}
	reg.NamespaceContents = true
	hooks := rampartadmission.ValidatingConfig(reg).Webhooks
	byName := map[string]admissionregistrationv1.ValidatingWebhook{}
	for _, h := range hooks {
		byName[h.Name] = h
	}
	if len(hooks) != 2 {
		t.Fatalf("webhooks %v, want the label's and the namespace policy's", byName)
	}
	for name, reaches := range map[string]map[string]bool{
		"namespace-contents.recycle.rampart.io": {
			"rampart.io/protection=Cascading,kubernetes.io/metadata.name=shop":           true,
			"rampart.io/protection=Always,kubernetes.io/metadata.name=shop":              true,
			"rampart.io/protection=Cascading,kubernetes.io/metadata.name=rampart-system": false,
			"kubernetes.io/metadata.name=shop":                                           false,
		},
		"ledgers.namespace-contents.recycle.rampart.io": {
			"team=ledger,env=prod,kubernetes.io/metadata.name=books": true,
			"team=ledger,kubernetes.io/metadata.name=books":          false,
			"env=prod,kubernetes.io/metadata.name=books":             false,
		},
	} {
		h, ok := byName[name]
		if !ok {
			t.Errorf("no webhook %s", name)
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(h.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		for ns, want := range reaches {
			set, _ := labels.ConvertSelectorToLabelsMap(ns)
			if got := sel.Matches(set); got != want {
				t.Errorf("%s reaches a namespace labelled %s: %v, want %v", name, ns, got, want)
			}
		}
		if *h.FailurePolicy != admissionregistrationv1.Ignore || *h.TimeoutSeconds > 2 {
			t.Errorf("%s fails %s within %ds: it must never hold up the namespace controller", name, *h.FailurePolicy, *h.TimeoutSeconds)
		}
		if len(h.MatchConditions) == 0 || !strings.Contains(h.MatchConditions[0].Expression, "system:serviceaccount:kube-system:namespace-controller") {
			t.Errorf("%s match conditions %v: want the namespace controller's deletes only", name, h.MatchConditions)
		}
		if len(h.Rules) != 1 || *h.Rules[0].Scope != admissionregistrationv1.NamespacedScope || h.Rules[0].Operations[0] != admissionregistrationv1.Delete {
			t.Errorf("%s rules %+v: want DELETE of namespaced resources", name, h.Rules)
		}
	}
}

// keptEntries is a Capturer that remembers what it kept.
type keptEntries struct{ entries []recyclebin.Entry }

func (k *keptEntries) Capture(_ context.Context, e recyclebin.Entry) (string, error) {
	k.entries = append(k.entries, e)
	return "entries/x", nil
}

type namespaces map[string]map[string]string

func (n namespaces) NamespaceLabels(ns string) (map[string]string, bool) {
	l, ok := n[ns]
	return l, ok
}
func (n namespaces) NamespaceTerminating(string) bool { return false }

// What the handler keeps: the namespace controller's deletes in a
// protected namespace, up to the cap; it allows every request.
func TestContentsKeepsAProtectedNamespacesObjects(t *testing.T) {
	nss := namespaces{
		"shop":    {v1alpha1.LabelProtection: "Cascading"},
		"books":   {"team": "ledger"},
		"scratch": {},
	}
	ledgers := v1alpha1.ProtectionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ledgers"}, Spec: v1alpha1.ProtectionPolicySpec{
		Resources:      []v1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}}},
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ledger"}}, Protection: v1alpha1.ProtectionCascading}}
	controller := "system:serviceaccount:kube-system:namespace-controller"
	for _, tc := range []struct {
		name, ns, user, object string
		kept                   bool
	}{
		{"labelled namespace", "shop", controller, "prices", true},
		{"namespace a policy selects", "books", controller, "prices", true},
		{"unprotected namespace", "scratch", controller, "prices", false},
		{"someone else's delete in a live namespace", "shop", "alice", "prices", false},
		{"past the cap", "shop", controller, strings.Repeat("x", 2048), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := &keptEntries{}
			h := &Contents{Bin: bin, Namespaces: nss, Policies: rampartadmission.PolicyList{ledgers},
				Tally: &recyclebin.NamespaceContents{Max: 1024}, Clock: clocktesting.NewFakePassiveClock(time.Now())}
			raw, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "prices", "namespace": tc.ns, "uid": "u1"}, "data": map[string]any{"v": tc.object}})
			resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Delete, Namespace: tc.ns, Name: "prices",
				Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
				UserInfo: authenticationv1.UserInfo{Username: tc.user}, OldObject: runtime.RawExtension{Raw: raw}}})
			if !resp.Allowed {
				t.Fatalf("refused: %+v; the namespace controller must never be refused", resp.Result)
			}
			if got := len(bin.entries) == 1; got != tc.kept {
				t.Fatalf("kept %v, want %v", bin.entries, tc.kept)
			}
			if tc.kept && (bin.entries[0].Namespace != tc.ns || bin.entries[0].Name != "prices" || bin.entries[0].DeletedBy != controller || bin.entries[0].Policy != "") {
				t.Errorf("entry %+v", bin.entries[0])
			}
		})
	}
}
