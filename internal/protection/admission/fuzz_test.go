package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/labels"

	nodebudget "github.com/rampart-io/rampart/internal/protection/nodebudget/admit"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
	"github.com/rampart-io/rampart/internal/protection/budget"
	budgets "github.com/rampart-io/rampart/internal/protection/budget/admit"
	changewindow "github.com/rampart-io/rampart/internal/protection/changewindow/admit"
	"github.com/rampart-io/rampart/internal/protection/deletion"
	flowcontrol "github.com/rampart-io/rampart/internal/protection/flowcontrol/admit"
	ownobjects "github.com/rampart-io/rampart/internal/protection/objects/admit"
	protectionpolicy "github.com/rampart-io/rampart/internal/protection/policy/admit"
	"github.com/rampart-io/rampart/internal/protection/protections"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
	recycle "github.com/rampart-io/rampart/internal/protection/recyclebin/admit"
)

// The fuzz targets here need no cluster: run them with -short so that
// TestMain starts none (`make fuzz` and `make fuzz-smoke` do).

// fuzzView is an empty cluster: nothing cascades, every object is absent.
type fuzzView struct{}

func (fuzzView) LivePods(string) deletion.Sample                       { return deletion.Sample{} }
func (fuzzView) BoundClaims(string) deletion.Sample                    { return deletion.Sample{} }
func (fuzzView) ScaledWorkloads(string) deletion.Sample                { return deletion.Sample{} }
func (fuzzView) ProtectedObjects(string) deletion.Sample               { return deletion.Sample{} }
func (fuzzView) CustomResources(string) deletion.Sample                { return deletion.Sample{} }
func (fuzzView) Dependents(types.UID) deletion.Sample                  { return deletion.Sample{} }
func (fuzzView) LivePodsOf(types.UID) deletion.Sample                  { return deletion.Sample{} }
func (fuzzView) HasSynced() bool                                       { return true }
func (fuzzView) ScaleReplicasPath(schema.GroupResource) (string, bool) { return "", false }
func (fuzzView) WorkloadLabels(schema.GroupResource, string, string) (map[string]string, types.UID, bool) {
	return nil, "", false
}
func (fuzzView) ExplicitReplicaTargets() []string                   { return nil }
func (fuzzView) NamespaceLabels(string) (map[string]string, bool)   { return nil, false }
func (fuzzView) PodLabels(string, string) (map[string]string, bool) { return nil, false }
func (fuzzView) NamespaceTerminating(string) bool                   { return false }

// fuzzInForce admits every protection at once.
type fuzzInForce struct{}

func (fuzzInForce) Object(context.Context, client.Object) error                    { return nil }
func (fuzzInForce) Key(context.Context, string, string) error                      { return nil }
func (fuzzInForce) Widen(context.Context, string, rampartadmission.Widening) error { return nil }

// fuzzPolicies holds one policy, "always", protecting every object.
type fuzzPolicies struct{}

var alwaysPolicy = v1alpha1.ProtectionPolicy{
	ObjectMeta: metav1.ObjectMeta{Name: "always"},
	Spec: v1alpha1.ProtectionPolicySpec{
		Resources:  []v1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}},
		Protection: v1alpha1.ProtectionAlways,
	},
}

func (fuzzPolicies) Policy(_ context.Context, name string) (*v1alpha1.ProtectionPolicy, bool, error) {
	if name != alwaysPolicy.Name {
		return nil, false, nil
	}
	return alwaysPolicy.DeepCopy(), true, nil
}

func (fuzzPolicies) List(context.Context) ([]v1alpha1.ProtectionPolicy, error) {
	return []v1alpha1.ProtectionPolicy{alwaysPolicy}, nil
}

func mustYAML(obj runtime.Object, manifest string) runtime.Object {
	if err := yaml.UnmarshalStrict([]byte(manifest), obj); err != nil {
		panic(err)
	}
	return obj
}

// fuzzServer is the manager's webhook server as manager.Run registers it,
// with fakes behind the handlers and panics not recovered (a panic fails
// the fuzz run instead of becoming a 500).
func fuzzServer(tb testing.TB) *http.ServeMux {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		tb.Fatal(err)
	}
	window := mustYAML(&v1alpha1.ChangeWindow{}, `
metadata: {name: w, namespace: default}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  fields: ["spec.template.spec.containers[*].image", "spec.replicas", "metadata.labels"]
  operations: [UPDATE, DELETE, CREATE]
  timeZone: UTC
  schedules: [{days: [Mon], start: "00:00", end: "00:01"}, {cron: "0 3 * * 2", duration: 1m}]`).(*v1alpha1.ChangeWindow)
	fc := mustYAML(&v1alpha1.DeletionFlowControl{}, `
metadata: {name: fc}
spec:
  resources: [{apiGroups: ["*"], resources: ["*"]}]
  limits: [{count: 1000000, window: 10m}]`).(*v1alpha1.DeletionFlowControl)
	pub := mustYAML(&v1alpha1.PodUnavailableBudget{}, `
metadata: {name: web, namespace: default}
spec: {selector: {matchLabels: {app: web}}, maxUnavailable: "50%"}`).(*v1alpha1.PodUnavailableBudget)
	rc := mustYAML(&v1alpha1.RecyclePolicy{}, `
metadata: {name: rc}
spec:
  resources: [{apiGroups: ["*"], resources: ["*"]}]
  objectSelector: {matchExpressions: [{key: tier, operator: NotIn, values: [scratch]}]}`).(*v1alpha1.RecyclePolicy)
	nb := mustYAML(&v1alpha1.NodeDisruptionBudget{}, `
metadata: {name: nb}
spec: {minAvailable: 1, rate: {count: 1000000, window: 10m}}`).(*v1alpha1.NodeDisruptionBudget)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(window, fc, pub, rc, nb).
		WithStatusSubresource(&v1alpha1.DeletionFlowControl{}, &v1alpha1.PodUnavailableBudget{}, &v1alpha1.NodeDisruptionBudget{}).Build()
	view := fuzzView{}
	// Every protection, as the manager serves it (protections.All): a new
	// one is fuzzed without an edit here.
	deps := rampartadmission.Deps{Cache: c, Direct: c, InForce: fuzzInForce{}, Policies: fuzzPolicies{},
		Deletion: view, ScaleTargets: view, Pods: view, Namespaces: view, BudgetIndex: budget.NewIndex(), Nodes: fuzzNodes{}, Bin: fuzzBin{}, NamespaceContentsMax: 1 << 20,
		LiveLabels: func(context.Context, schema.GroupVersionResource, string, string) (map[string]string, bool, error) {
			return map[string]string{v1alpha1.LabelExplicitReplicas: "true"}, true, nil
		}}
	mux := http.NewServeMux()
	for _, r := range rampartadmission.Routes(rampartadmission.Initialize(protections.All(), deps)) {
		wh := &webhook.Admission{Handler: r.Handler, WithContextFunc: r.WithContext}
		wh.WithRecoverPanic(false)
		mux.Handle(r.Path, wh)
	}
	return mux
}

// fuzzBin keeps nothing and fails the copies of odd-length names, so both
// answers of a capture are fuzzed.
type fuzzBin struct{}

func (fuzzBin) Capture(_ context.Context, e recyclebin.Entry) (string, error) {
	if len(e.Name)%2 == 1 {
		return "", recyclebin.ErrStore
	}
	return "entries/x", nil
}

// fuzzPaths are the URLs the API server calls, one per registered handler.
var fuzzPaths = []string{
	rampartadmission.DeletionPath,
	rampartadmission.ReplicasPath,
	protectionpolicy.DeletionPrefix + alwaysPolicy.Name,
	protectionpolicy.ReplicasPrefix + alwaysPolicy.Name,
	changewindow.Prefix + "default/w",
	changewindow.SpecPath,
	ownobjects.ObjectsPath,
	ownobjects.SpecPath,
	flowcontrol.Prefix + "fc",
	budgets.Path,
	rampartadmission.ProbePath,
	recycle.Prefix + "rc",
	recycle.ContentsPath,
	nodebudget.Prefix + "nb",
}

// TestFuzzReachesEveryRoute: a protection added to admission.Protections is
// fuzzed too, or this fails.
func TestFuzzReachesEveryRoute(t *testing.T) {
	for _, r := range rampartadmission.Routes(rampartadmission.Initialize(protections.All(), rampartadmission.Deps{})) {
		if !slices.ContainsFunc(fuzzPaths, func(p string) bool { return strings.HasPrefix(p, r.Path) }) {
			t.Errorf("the manager serves %s, which FuzzAdmissionReview never calls: add a path under it to fuzzPaths", r.Path)
		}
	}
}

// reviewCodecs decodes a review body as controller-runtime does.
var reviewCodecs = func() runtime.Decoder {
	s := runtime.NewScheme()
	_ = admissionv1.AddToScheme(s)
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

// protectedDelete says whether body is a DELETE review of an object whose
// labels, read leniently, say rampart.io/protection=Always.
func protectedDelete(body []byte) bool {
	var review admissionv1.AdmissionReview
	if _, _, err := reviewCodecs.Decode(body, nil, &review); err != nil || review.Request == nil {
		return false
	}
	if review.Request.Operation != admissionv1.Delete {
		return false
	}
	var old struct {
		Metadata struct {
			Labels map[string]any `json:"labels"`
		} `json:"metadata"`
	}
	if json.Unmarshal(review.Request.OldObject.Raw, &old) != nil {
		// What cannot be read at all cannot be allowed either: the
		// handler must answer with an error, which the invariant below
		// checks as "not allowed" whenever labels are seen.
		return bytes.Contains(review.Request.OldObject.Raw, []byte(`"Always"`)) &&
			bytes.Contains(review.Request.OldObject.Raw, []byte(v1alpha1.LabelProtection))
	}
	return old.Metadata.Labels[v1alpha1.LabelProtection] == string(v1alpha1.ProtectionAlways)
}

// isDelete says whether body decodes, as the webhook decodes it, to a
// DELETE review.
func isDelete(body []byte) bool {
	var review admissionv1.AdmissionReview
	_, _, err := reviewCodecs.Decode(body, nil, &review)
	return err == nil && review.Request != nil && review.Request.Operation == admissionv1.Delete
}

// seedReview is an AdmissionReview as kube-apiserver v1.36 sends it.
func seedReview(op admissionv1.Operation, gvk metav1.GroupVersionKind, gvr metav1.GroupVersionResource, sub, ns, name string, obj, old, opts string) []byte {
	raw := func(s string) runtime.RawExtension {
		if s == "" {
			return runtime.RawExtension{}
		}
		return runtime.RawExtension{Raw: []byte(s)}
	}
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "705ab4f5-6393-11e8-b7cc-42010a800002", Kind: gvk, Resource: gvr, SubResource: sub,
			RequestKind: &gvk, RequestResource: &gvr, RequestSubResource: sub,
			Name: name, Namespace: ns, Operation: op,
			Object: raw(obj), OldObject: raw(old), Options: raw(opts),
		},
	}
	r.Request.UserInfo.Username = "kubernetes-admin"
	r.Request.UserInfo.Groups = []string{"system:masters", "system:authenticated"}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

const fuzzDeployment = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","uid":"6d0c8d25-0c57-4d1b-8f7b-3f4a1c8f0e11","resourceVersion":"812","generation":1,"labels":{"app":"web","rampart.io/protection":"Always","rampart.io/explicit-replicas":"true"},"annotations":{"rampart.io/generate-pub":"true"}},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"app","image":"registry.example/app:1"}]}},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}}},"status":{"replicas":3}}`

const fuzzPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default","uid":"0b1c2d3e-0000-4000-8000-000000000001","labels":{"app":"web","rampart.io/pub-covered":"true","rampart.io/protection":"Always"}},"spec":{"nodeName":"kwok-node-0","containers":[{"name":"app","image":"registry.example/app:1"}]},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`

func fuzzSeeds() [][]byte {
	deploy := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	deploys := metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	scale := metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	pod := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	pods := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	cw := metav1.GroupVersionKind{Group: "rampart.io", Version: "v1alpha1", Kind: "ChangeWindow"}
	cws := metav1.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "changewindows"}
	deleteOpts := `{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","propagationPolicy":"Background"}`
	scaled := strings.Replace(fuzzDeployment, `"replicas":3,"selector"`, `"replicas":30,"selector"`, 1)
	return [][]byte{
		// kubectl delete deployment web, labelled Always
		seedReview(admissionv1.Delete, deploy, deploys, "", "default", "web", "", fuzzDeployment, deleteOpts),
		// kubectl delete pod web-0 --dry-run=server
		seedReview(admissionv1.Delete, pod, pods, "", "default", "web-0", "", fuzzPod, `{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","dryRun":["All"]}`),
		// an eviction of web-0
		seedReview(admissionv1.Create, metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, pods, "eviction", "default", "web-0",
			`{"kind":"Eviction","apiVersion":"policy/v1","metadata":{"name":"web-0","namespace":"default"}}`, "", `{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`),
		// kubectl scale deployment web --replicas 30
		seedReview(admissionv1.Update, scale, deploys, "scale", "default", "web",
			`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"web","namespace":"default"},"spec":{"replicas":30},"status":{"replicas":3,"selector":"app=web"}}`,
			`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"web","namespace":"default"},"spec":{"replicas":3},"status":{"replicas":3,"selector":"app=web"}}`,
			`{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}`),
		// kubectl edit of spec.replicas
		seedReview(admissionv1.Update, deploy, deploys, "", "default", "web", scaled, fuzzDeployment, `{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}`),
		// kubectl create of a ChangeWindow
		seedReview(admissionv1.Create, cw, cws, "", "default", "nightly",
			`{"apiVersion":"rampart.io/v1alpha1","kind":"ChangeWindow","metadata":{"name":"nightly","namespace":"default"},"spec":{"resources":[{"apiGroups":["apps"],"resources":["deployments"]}],"selector":{"matchLabels":{"tier":"frontend"}},"fields":["spec.template.spec.containers[*].image"],"timeZone":"Europe/Paris","schedules":[{"days":["Mon","Tue"],"start":"22:00","end":"02:00"},{"cron":"*/15 3 * * 1-5","duration":"10m"}],"override":{"users":["oncall"]}}}`,
			"", `{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`),
		// a pod created where a budget covers it
		seedReview(admissionv1.Create, pod, pods, "", "default", "web-1", strings.Replace(fuzzPod, "web-0", "web-1", 1), "", ""),
		// a DELETE with oldObject missing
		seedReview(admissionv1.Delete, deploy, deploys, "", "default", "web", "", "", deleteOpts),
		[]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x","operation":"DELETE","oldObject":` + fuzzPod + `}}`),
		// found by review of the fuzz target: a label value that is not a
		// string made the handler read no labels at all, and allow
		seedReview(admissionv1.Delete, deploy, deploys, "", "default", "web", "",
			strings.Replace(fuzzDeployment, `"app":"web",`, `"app":1,`, 1), deleteOpts),
		[]byte(`{}`),
		[]byte(`[`),
	}
}

// FuzzAdmissionReview posts arbitrary bodies to every webhook the manager
// serves: none may panic, and a DELETE of an object labelled
// rampart.io/protection=Always is never allowed by the deletion webhooks,
// whatever else the body says.
func FuzzAdmissionReview(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	mux := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		protected := protectedDelete(body)
		deleting := isDelete(body)
		for _, path := range fuzzPaths {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() { defer close(done); mux.ServeHTTP(rec, req) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				buf := make([]byte, 1<<20)
				t.Fatalf("%s hangs on body %q\n%s", path, body, buf[:goruntime.Stack(buf, true)])
			}
			// The "always" policy protects every object: through its
			// webhook no DELETE at all is allowed.
			byPolicy := deleting && path == protectionpolicy.DeletionPrefix+alwaysPolicy.Name
			if !byPolicy && (!protected || (path != rampartadmission.DeletionPath && !strings.HasPrefix(path, protectionpolicy.DeletionPrefix))) {
				continue
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err == nil && out.Response != nil && out.Response.Allowed {
				t.Fatalf("%s allowed a DELETE of a protected object (labelled %v, by policy %v):\nbody: %q\nanswer: %s",
					path, protected, byPolicy, body, rec.Body.String())
			}
		}
	})
}

// The seed corpus is itself an assertion: the seed DELETE of a labelled
// Deployment (in the shape kube-apiserver sends) is denied, naming the
// label, so the fuzz target starts from reviews the handlers judge.
func TestFuzzSeedDeleteIsDenied(t *testing.T) {
	mux := fuzzServer(t)
	body := fuzzSeeds()[0]
	if !protectedDelete(body) {
		t.Fatal("the seed DELETE review does not read as a protected delete")
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, rampartadmission.DeletionPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	mux.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	if out.Response.Allowed || !strings.Contains(out.Response.Result.Message, "rampart.io/protection=Always") {
		t.Fatalf("the DELETE of a protected Deployment got %+v", out.Response)
	}
}

// A DELETE review of a protected object whose labels cannot all be read
// (a label value that is not a string) used to be allowed: the labels read
// as none. It is refused now, and so is one without its oldObject.
func TestProtectedDeleteWithUnreadableLabelsIsRefused(t *testing.T) {
	mux := fuzzServer(t)
	deploy := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	deploys := metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	for name, old := range map[string]string{
		"a label that is a number":  strings.Replace(fuzzDeployment, `"app":"web",`, `"app":1,`, 1),
		"a label that is an object": strings.Replace(fuzzDeployment, `"app":"web",`, `"app":{},`, 1),
		"no oldObject":              "",
	} {
		body := seedReview(admissionv1.Delete, deploy, deploys, "", "default", "web", "", old, "")
		for _, path := range []string{rampartadmission.DeletionPath, protectionpolicy.DeletionPrefix + alwaysPolicy.Name} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			mux.ServeHTTP(rec, req)
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("%s, %s: answer %q: %v", name, path, rec.Body.String(), err)
			}
			if out.Response.Allowed || out.Response.Result == nil || out.Response.Result.Code != http.StatusBadRequest {
				t.Errorf("%s, %s: got %s, want a 400 refusal", name, path, rec.Body.String())
			}
		}
	}
}

// fuzzNodes are two Ready, schedulable nodes.
type fuzzNodes struct{}

func (fuzzNodes) NodeUnavailable(string) string { return "" }

func (fuzzNodes) NodeLabels(string) map[string]string { return nil }

func (fuzzNodes) NodeCount() budget.NodeCount { return budget.NodeCount{Total: 2} }

func (fuzzNodes) Nodes(labels.Selector) []*corev1.Node {
	var out []*corev1.Node
	for _, name := range []string{"n1", "n2"} {
		out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	return out
}
