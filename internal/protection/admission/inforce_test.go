package admission_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// A protection holds from the moment the API accepts the request that
// creates it: each case creates one and acts against it at once, with no
// sleep and no wait for Ready, and counts the times the act went through.
// INFORCE_ITERATIONS sets the number of rounds (hack/in-force-loop.sh runs
// 50); INFORCE_REPORT=1 prints bypasses and the creating request's latency
// beside a like request that no Rampart webhook sees.

type inForceClients struct {
	// create makes the protection; act acts against it, perhaps through
	// another API server.
	create, act kubernetes.Interface
	createDyn   dynamic.Interface
}

// inForceCase returns the latency of the creating request, of the like
// request no webhook sees, and whether the act went through.
type inForceCase func(t *testing.T, c inForceClients, ns string, i int) (created, baseline time.Duration, bypassed bool)

var inForceCases = []struct {
	name string
	run  inForceCase
}{
	{"protection-label", protectionLabelCase},
	{"explicit-replicas-label", explicitReplicasCase},
	{"ProtectionPolicy", policyCase},
	{"policy-guarding-scale", policyGuardingScaleCase},
	{"workload-under-policy", workloadUnderPolicyCase},
	{"ChangeWindow", windowCase},
	{"DeletionFlowControl", flowControlCase},
}

// timed runs a creating request and returns how long it took to be
// accepted. A request refused because its protection is not in force yet
// (503: the API server was too slow to take the new webhooks in time) is
// what the user is told to retry, and was not accepted, so it cannot be a
// bypass: timed retries it a few times, as a script would, and counts the
// refusals (reported with INFORCE_REPORT). The time includes the retries.
func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	for try := 0; try < 4 && apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "not in force yet"); try++ {
		notInForceRefusals.Add(1)
		time.Sleep(time.Second)
		err = f()
	}
	return time.Since(start), err
}

// notInForceRefusals counts the creating requests refused as not in force
// yet and retried by timed.
var notInForceRefusals atomic.Int64

func mergePatch(labels string) []byte { return []byte(`{"metadata":{"labels":{` + labels + `}}}`) }

func protectionLabelCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	ctx := context.Background()
	name := "prot-" + strconv.Itoa(i)
	if _, err := c.create.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base, err := timed(func() error {
		_, err := c.create.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, mergePatch(`"unrelated":"x"`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	took, err := timed(func() error {
		_, err := c.create.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, mergePatch(`"rampart.io/protection":"Always"`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.act.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
	return took, base, err == nil
}

func explicitReplicasCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	ctx := context.Background()
	name := "key-" + strconv.Itoa(i)
	if _, err := c.create.AppsV1().Deployments(ns).Create(ctx, newDeployment(name, 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base, err := timed(func() error {
		_, err := c.create.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, mergePatch(`"unrelated":"x"`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	took, err := timed(func() error {
		_, err := c.create.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, mergePatch(`"rampart.io/explicit-replicas":"true"`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.act.AppsV1().Deployments(ns).UpdateScale(ctx, name,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{})
	return took, base, err == nil
}

// createRampart creates a Rampart object from YAML, timed.
func createRampart(t *testing.T, c inForceClients, resource, ns, manifest string) time.Duration {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: resource}
	var ri dynamic.ResourceInterface = c.createDyn.Resource(gvr)
	if ns != "" {
		ri = c.createDyn.Resource(gvr).Namespace(ns)
	}
	took, err := timed(func() error {
		_, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ri.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}) })
	return took
}

// plainCreate is the baseline: a ConfigMap creation no webhook sees.
func plainCreate(t *testing.T, c inForceClients, ns, name string, labels map[string]string) time.Duration {
	t.Helper()
	took, err := timed(func() error {
		_, err := c.create.CoreV1().ConfigMaps(ns).Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return took
}

func policyCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	name := fmt.Sprintf("inforce-%s-%d", ns, i)
	base := plainCreate(t, c, ns, name, map[string]string{"inforce": name})
	took := createRampart(t, c, "protectionpolicies", "", fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {inforce: %s}}
  protection: Always`, name, ns, name))
	err := c.act.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	return took, base, err == nil
}

// A policy that guards replicas guards the scale subresource of the
// workloads it covers at once.
func policyGuardingScaleCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	ctx := context.Background()
	name := fmt.Sprintf("scale-%s-%d", ns, i)
	w := "s-" + strconv.Itoa(i)
	if _, err := c.create.AppsV1().Deployments(ns).Create(ctx, newDeployment(w, 1, map[string]string{"guarded": name}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := plainCreate(t, c, ns, name, nil)
	took := createRampart(t, c, "protectionpolicies", "", fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: %s}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {guarded: %s}}
  explicitReplicas: {guard: All}`, name, ns, name))
	_, err := c.act.AppsV1().Deployments(ns).UpdateScale(ctx, w,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: w, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{})
	return took, base, err == nil
}

// A workload created under a policy that guards replicas is guarded at
// once: its scale subresource too.
func workloadUnderPolicyCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	ctx := context.Background()
	name := fmt.Sprintf("guarded-%s-%d", ns, i)
	createRampart(t, c, "protectionpolicies", "", fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: %s}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {guarded: %s}}
  explicitReplicas: {guard: All}`, name, ns, name))
	base, err := timed(func() error {
		_, err := c.create.AppsV1().Deployments(ns).Create(ctx, newDeployment("plain-"+strconv.Itoa(i), 1, nil), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	w := "w-" + strconv.Itoa(i)
	took, err := timed(func() error {
		_, err := c.create.AppsV1().Deployments(ns).Create(ctx, newDeployment(w, 1, map[string]string{"guarded": name}), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.act.AppsV1().Deployments(ns).UpdateScale(ctx, w,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: w, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{})
	return took, base, err == nil
}

func windowCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	name := "frozen-" + strconv.Itoa(i)
	base := plainCreate(t, c, ns, name, map[string]string{"window": name})
	now := time.Now().UTC()
	took := createRampart(t, c, "changewindows", ns, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  selector: {matchLabels: {window: %s}}
  fields: ["data"]
  freezes: [{start: %q, end: %q, reason: in-force test}]`, name, name,
		now.Add(-time.Hour).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)))
	_, err := c.act.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{})
	return took, base, err == nil
}

func flowControlCase(t *testing.T, c inForceClients, ns string, i int) (time.Duration, time.Duration, bool) {
	name := fmt.Sprintf("inforce-%s-%d", ns, i)
	base := plainCreate(t, c, ns, name+"-a", map[string]string{"flow": name})
	plainCreate(t, c, ns, name+"-b", map[string]string{"flow": name})
	took := createRampart(t, c, "deletionflowcontrols", "", fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {flow: %s}}
  limits: [{count: 1, window: 1h}]`, name, ns, name))
	ctx := context.Background()
	first := c.act.CoreV1().ConfigMaps(ns).Delete(ctx, name+"-a", metav1.DeleteOptions{})
	second := c.act.CoreV1().ConfigMaps(ns).Delete(ctx, name+"-b", metav1.DeleteOptions{})
	if first != nil {
		t.Fatalf("first delete under a limit of 1: %v", first)
	}
	return took, base, second == nil
}

func iterations(def int) int {
	if n, err := strconv.Atoi(os.Getenv("INFORCE_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return def
}

func runInForce(t *testing.T, env *clustertest.Env, act kubernetes.Interface, label string) {
	c := inForceClients{create: env.Client, act: act, createDyn: env.Dynamic}
	n := iterations(3)
	for _, tc := range inForceCases {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			var took, base []time.Duration
			bypasses := 0
			refusedBefore := notInForceRefusals.Load()
			for i := range n {
				d, b, bypassed := tc.run(t, c, ns, i)
				took, base = append(took, d), append(base, b)
				if bypassed {
					bypasses++
				}
			}
			if os.Getenv("INFORCE_REPORT") != "" {
				fmt.Printf("INFORCE %s %-24s iterations=%d bypasses=%d refused-not-in-force=%d create p50=%s p99=%s baseline p50=%s p99=%s\n",
					label, tc.name, n, bypasses, notInForceRefusals.Load()-refusedBefore, pct(took, 50), pct(took, 99), pct(base, 50), pct(base, 99))
			}
			if bypasses > 0 {
				t.Errorf("%d of %d acts went through right after the protection was accepted", bypasses, n)
			}
		})
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(time.Millisecond)
}

func TestProtectionsHoldOnceAccepted(t *testing.T) {
	env := clustertest.Get(t)
	runInForce(t, env, env.Client, "managers=1")
}

// With three manager replicas and two API servers, a protection created
// through one API server holds at once for a request sent to the other.
func TestProtectionsHoldOnceAcceptedAcrossReplicasAndAPIServers(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3, APIServers: 2})
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = env.APIServerURLs()[1]
	other, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runInForce(t, env, other, "managers=3,apiservers=2")
	t.Run("namespace-relabelled-into-policy", func(t *testing.T) { runRelabel(t, env, other, "managers=3,apiservers=2") })
}

// A DeletionFlowControl says when it counts: Ready True, for its current
// generation, once its webhook is registered.
func TestFlowControlReportsReady(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	c := inForceClients{create: env.Client, act: env.Client, createDyn: env.Dynamic}
	name := "ready-" + ns
	createRampart(t, c, "deletionflowcontrols", "", fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  limits: [{count: 5, window: 1m}]`, name, ns))
	eventually(t, "DeletionFlowControl "+name+" Ready", func(ctx context.Context) (bool, error) {
		u, err := env.Dynamic.Resource(flowControls).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" && gen == u.GetGeneration() {
				return true, nil
			}
		}
		return false, nil
	})
	out, err := env.Kubectl(t, "get", "deletionflowcontrol", name)
	if err != nil || !strings.Contains(out, "READY") || !strings.Contains(out, "True") {
		t.Errorf("kubectl get shows no Ready column with True: %v\n%s", err, out)
	}
}

// A namespace relabelled into the namespaceSelector of a policy has its
// objects protected from the moment the relabel is accepted: a delete and
// a scale sent at once are denied. (The API server matches webhooks'
// namespace selectors against its cache of namespaces, which may lag; a
// Scale carries no labels, and the scale webhook names the workloads the
// manager knew before the relabel.)
// A new policy judges every scale in the namespaces it selects for its
// first 30 s, which would hide the relabel's own path: so the policies are
// made first, and the relabels wait, once, until those first seconds are
// over. That wait is before the protection (the relabel) is created;
// each scale is sent at once after its relabel is accepted.
func TestNamespaceRelabelledIntoAPolicyHoldsAtOnce(t *testing.T) {
	env := clustertest.Get(t)
	runRelabel(t, env, env.Client, "managers=1")
}

func runRelabel(t *testing.T, env *clustertest.Env, act kubernetes.Interface, label string) {
	ctx := context.Background()
	c := inForceClients{create: env.Client, act: env.Client, createDyn: env.Dynamic}
	n := iterations(3)
	type round struct{ ns, policy, key, workload string }
	var rounds []round
	for i := range n {
		r := round{ns: env.Namespace(t), key: fmt.Sprintf("inforce-relabel-%d", i), workload: "r-" + strconv.Itoa(i)}
		r.policy = "relabel-" + r.ns
		if _, err := env.Client.AppsV1().Deployments(r.ns).Create(ctx, newDeployment(r.workload, 1, map[string]string{"guarded": r.policy}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		createRampart(t, c, "protectionpolicies", "", fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: %s}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  namespaceSelector: {matchLabels: {%s: "yes"}}
  objectSelector: {matchLabels: {guarded: %s}}
  protection: Always
  explicitReplicas: {guard: All}`, r.policy, r.key, r.policy))
		rounds = append(rounds, r)
	}
	widened := func() bool {
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rampart-validating", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range cfg.Webhooks {
			for _, r := range rounds {
				if strings.HasSuffix(h.Name, r.policy+".scale.policy.rampart.io") {
					return true
				}
			}
		}
		return false
	}
	for deadline := time.Now().Add(90 * time.Second); widened(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("the new policies still judge every scale after 90 s")
		}
	}
	var took, base []time.Duration
	bypasses := 0
	for _, r := range rounds {
		relabel := func(value string) time.Duration {
			d, err := timed(func() error {
				_, err := env.Client.CoreV1().Namespaces().Patch(ctx, r.ns, types.MergePatchType, mergePatch(fmt.Sprintf(`%q:%q`, r.key, value)), metav1.PatchOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		base = append(base, relabel("no"))
		took = append(took, relabel("yes"))
		_, err := act.AppsV1().Deployments(r.ns).UpdateScale(ctx, r.workload,
			&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: r.workload, Namespace: r.ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{})
		delErr := act.AppsV1().Deployments(r.ns).Delete(ctx, r.workload, metav1.DeleteOptions{})
		if err == nil || delErr == nil {
			bypasses++
		}
		for _, e := range []error{err, delErr} {
			if e != nil && !strings.Contains(e.Error(), r.policy) {
				t.Errorf("refused in %s, but not by the policy: %v", r.ns, e)
			}
		}
	}
	if os.Getenv("INFORCE_REPORT") != "" {
		fmt.Printf("INFORCE %s namespace-relabelled-into-policy iterations=%d bypasses=%d relabel p50=%s p99=%s baseline p50=%s p99=%s\n",
			label, n, bypasses, pct(took, 50), pct(took, 99), pct(base, 50), pct(base, 99))
	}
	if bypasses > 0 {
		t.Errorf("%d of %d scales went through right after the namespace was relabelled into the policy", bypasses, n)
	}
}
