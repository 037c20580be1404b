package deletion

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/protection"
)

// fakeView answers from maps; the informer-backed view is tested against a
// real cluster in internal/protection/clusterview.
type fakeView struct {
	pods, claims, workloads, protected map[string]int // by namespace
	crs                                map[string]int // by CRD name
	dependents, podsOf                 map[types.UID]int
}

func sample(n int, kind string) Sample {
	s := Sample{Count: n}
	for i := 0; i < n && i < MaxExamples; i++ {
		s.Examples = append(s.Examples, kind+"/x")
	}
	return s
}

func (f fakeView) LivePods(ns string) Sample         { return sample(f.pods[ns], "pod") }
func (f fakeView) BoundClaims(ns string) Sample      { return sample(f.claims[ns], "pvc") }
func (f fakeView) ScaledWorkloads(ns string) Sample  { return sample(f.workloads[ns], "deployment") }
func (f fakeView) ProtectedObjects(ns string) Sample { return sample(f.protected[ns], "configmap") }
func (f fakeView) CustomResources(crd string) Sample { return sample(f.crs[crd], "widget") }
func (f fakeView) Dependents(uid types.UID) Sample   { return sample(f.dependents[uid], "pod") }
func (f fakeView) LivePodsOf(uid types.UID) Sample   { return sample(f.podsOf[uid], "pod") }

var (
	nsGR     = schema.GroupResource{Resource: "namespaces"}
	deployGR = schema.GroupResource{Group: "apps", Resource: "deployments"}
	cmGR     = schema.GroupResource{Resource: "configmaps"}
	crdGR    = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
)

// TestDecide is the deletion decision table. Each row also runs through
// the compiled policies, evaluated with kube-apiserver's own libraries
// (agreeCompiled): a row the compiled policies cannot decide (Cascading)
// must be left to the webhook by them.
func TestDecide(t *testing.T) {
	busy := fakeView{
		pods:       map[string]int{"shop": 12},
		claims:     map[string]int{"shop": 2},
		workloads:  map[string]int{"shop": 3},
		protected:  map[string]int{"vault": 1},
		crs:        map[string]int{"widgets.example.com": 1000},
		dependents: map[types.UID]int{"owner": 2},
		podsOf:     map[types.UID]int{"web": 3, "drained": 1},
	}
	tests := []struct {
		name    string
		req     Request
		allowed bool
		rule    string
		// wantIn are fragments the denial must contain: the rule, the
		// object, what it would cascade to and the command that proceeds.
		wantIn []string
	}{
		{name: "no protection", req: Request{Object: protection.Object{Resource: nsGR, Name: "shop"}}, allowed: true},
		{
			name: "Always denies even an empty namespace",
			req:  Request{Object: protection.Object{Resource: nsGR, Name: "prod"}, Level: v1alpha1.ProtectionAlways},
			rule: RuleAlways,
			wantIn: []string{`namespace "prod"`, "rampart.io/protection=Always",
				"kubectl label namespace/prod rampart.io/protection-"},
		},
		{
			name: "Always names a namespaced object's group, namespace and unlabel command",
			req:  Request{Object: protection.Object{Resource: deployGR, Namespace: "shop", Name: "web"}, Level: v1alpha1.ProtectionAlways},
			rule: RuleAlways,
			wantIn: []string{`deployments.apps "web" in namespace "shop"`,
				"kubectl label -n shop deployments.apps/web rampart.io/protection-"},
		},
		{
			name:   "Always from a policy says how to lift it",
			req:    Request{Object: protection.Object{Resource: cmGR, Namespace: "a", Name: "c"}, Level: v1alpha1.ProtectionAlways, Source: protection.Source{Policy: "critical"}},
			rule:   RuleAlways,
			wantIn: []string{`ProtectionPolicy "critical"`, "kubectl edit protectionpolicy critical"},
		},
		{
			name: "Cascading namespace with workloads, pods and volumes is denied with each listed",
			req:  Request{Object: protection.Object{Resource: nsGR, Name: "shop"}, Level: v1alpha1.ProtectionCascading},
			rule: RuleCascading,
			wantIn: []string{"3 workloads with replicas > 0", "12 non-terminal pods (pod/x, pod/x, pod/x, …)",
				"2 bound PersistentVolumeClaims", "kubectl rampart scale -n shop"},
		},
		{
			name: "Cascading namespace holding a protected object is denied",
			req:  Request{Object: protection.Object{Resource: nsGR, Name: "vault"}, Level: v1alpha1.ProtectionCascading},
			rule: RuleCascading, wantIn: []string{"1 protected objects"},
		},
		{
			name:    "Cascading empty namespace is allowed",
			req:     Request{Object: protection.Object{Resource: nsGR, Name: "empty"}, Level: v1alpha1.ProtectionCascading},
			allowed: true,
		},
		{
			name: "Cascading namespace ignores orphan: the namespace controller deletes everything",
			req:  Request{Object: protection.Object{Resource: nsGR, Name: "shop"}, Level: v1alpha1.ProtectionCascading, Propagation: metav1.DeletePropagationOrphan},
			rule: RuleCascading, wantIn: []string{"non-terminal pods"},
		},
		{
			name: "Cascading CRD with custom resources left is denied",
			req:  Request{Object: protection.Object{Resource: crdGR, Name: "widgets.example.com"}, Level: v1alpha1.ProtectionCascading},
			rule: RuleCascading,
			wantIn: []string{`customresourcedefinitions.apiextensions.k8s.io "widgets.example.com"`,
				"1000 custom resources", "kubectl delete widgets.example.com --all --all-namespaces"},
		},
		{
			name:    "Cascading CRD without custom resources is allowed",
			req:     Request{Object: protection.Object{Resource: crdGR, Name: "gadgets.example.com"}, Level: v1alpha1.ProtectionCascading},
			allowed: true,
		},
		{
			name: "explicit deletion: a workload with replicas must be scaled to 0 first",
			req: Request{Object: protection.Object{Resource: deployGR, Namespace: "shop", Name: "web"}, UID: "web", Level: v1alpha1.ProtectionCascading,
				Workload: true, Replicas: ptr.To[int64](3)},
			rule: RuleCascading,
			wantIn: []string{"3 desired replicas", "3 live pods",
				"kubectl rampart scale -n shop deployments.apps/web --replicas 0 && kubectl delete -n shop deployments.apps/web"},
		},
		{
			name: "a workload at 0 replicas whose pods still run is denied",
			req: Request{Object: protection.Object{Resource: deployGR, Namespace: "shop", Name: "web"}, UID: "drained", Level: v1alpha1.ProtectionCascading,
				Workload: true, Replicas: ptr.To[int64](0)},
			rule: RuleCascading, wantIn: []string{"1 live pods"},
		},
		{
			name: "a workload at 0 replicas with no pods is allowed",
			req: Request{Object: protection.Object{Resource: deployGR, Namespace: "shop", Name: "web"}, UID: "gone", Level: v1alpha1.ProtectionCascading,
				Workload: true, Replicas: ptr.To[int64](0)},
			allowed: true,
		},
		{
			name: "orphan propagation cascades nothing from a workload",
			req: Request{Object: protection.Object{Resource: deployGR, Namespace: "shop", Name: "web"}, UID: "web", Level: v1alpha1.ProtectionCascading,
				Workload: true, Replicas: ptr.To[int64](3), Propagation: metav1.DeletePropagationOrphan},
			allowed: true,
		},
		{
			name: "an owner with live dependents is denied",
			req:  Request{Object: protection.Object{Resource: cmGR, Namespace: "a", Name: "c"}, UID: "owner", Level: v1alpha1.ProtectionCascading},
			rule: RuleCascading, wantIn: []string{"2 live dependents", "--cascade=orphan"},
		},
		{
			name:    "an owner deleted with orphan propagation is allowed",
			req:     Request{Object: protection.Object{Resource: cmGR, Namespace: "a", Name: "c"}, UID: "owner", Level: v1alpha1.ProtectionCascading, Propagation: metav1.DeletePropagationOrphan},
			allowed: true,
		},
		{
			name:    "an object owning nothing is allowed",
			req:     Request{Object: protection.Object{Resource: cmGR, Namespace: "a", Name: "c"}, UID: "lonely", Level: v1alpha1.ProtectionCascading},
			allowed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.req, busy)
			if v.Allowed != tt.allowed {
				t.Fatalf("Allowed = %v, want %v (message %q)", v.Allowed, tt.allowed, v.Message)
			}
			if v.Reason != tt.rule {
				t.Errorf("Reason = %q, want %q", v.Reason, tt.rule)
			}
			for _, frag := range tt.wantIn {
				if !strings.Contains(v.Message, frag) {
					t.Errorf("message %q lacks %q", v.Message, frag)
				}
			}
			// One meaning, two engines: the compiled policies
			// (rampart export policies, the manager's hybrid mode)
			// answer each row as Decide does.
			agreeCompiled(t, tt.req, v)
		})
	}
}

func BenchmarkDecideAlways(b *testing.B) {
	r := Request{Object: protection.Object{Resource: nsGR, Name: "prod"}, Level: v1alpha1.ProtectionAlways}
	for b.Loop() {
		if Decide(r, fakeView{}).Allowed {
			b.Fatal("allowed")
		}
	}
}
