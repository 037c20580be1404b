package admission_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
	rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"
)

// This package's cluster runs the Rampart manager: every test here goes
// through the real API server, which calls the webhook and honours it.
// Its manager keeps every rule in the webhooks (--compiled-policies=false):
// the tests here are about the webhooks' judgement and what it leaves
// (Events, metrics), which the API server's own policies do not. The
// default, hybrid, is tested with clusters of their own
// (TestOutageBlocksOnlyProtectedObjects) and by the other packages.
func TestMain(m *testing.M) { clustertest.Main(m, clusterOptions()) }

// clusterOptions are those of this package's cluster, for a test that
// starts another alike but for one option.
func clusterOptions() localcluster.Options {
	return localcluster.Options{ManagerArgs: []string{"--replicas-exempt-users=autoscaler-bot", "--budget-disruption-timeout=5s", "--compiled-policies=false",
		// Settle the recycle bin's captures of refused deletes quickly.
		"--recycle-bin-not-deleted-after=3s",
		// For BenchmarkDeleteThroughAPIServer's RAMPART_BENCH_PROFILE.
		"--profiling"}}
}

const protectionLabel = "rampart.io/protection"

// object is one kind the deletion webhook covers, handled through the
// dynamic client so every test treats all kinds alike.
type object struct {
	kind     string
	resource string // as in the denial message and kubectl
	gvr      schema.GroupVersionResource
	spec     map[string]any
}

var objects = []object{
	{kind: "Namespace", resource: "namespace", gvr: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}},
	{kind: "ConfigMap", resource: "configmap", gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
	{
		kind: "Deployment", resource: "deployments.apps",
		gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		spec: map[string]any{
			"replicas": int64(2),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "x"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.example/app:1"}}},
			},
		},
	},
}

func (o object) client(env *clustertest.Env, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return env.Dynamic.Resource(o.gvr)
	}
	return env.Dynamic.Resource(o.gvr).Namespace(ns)
}

func (o object) create(ctx context.Context, env *clustertest.Env, ns, name string, labels map[string]string) error {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(o.gvr.GroupVersion().String())
	u.SetKind(o.kind)
	u.SetName(name)
	u.SetLabels(labels)
	if o.spec != nil {
		u.Object["spec"] = o.spec
	}
	_, err := o.client(env, ns).Create(ctx, u, metav1.CreateOptions{})
	return err
}

func (o object) delete(ctx context.Context, env *clustertest.Env, ns, name string, opts metav1.DeleteOptions) error {
	return o.client(env, ns).Delete(ctx, name, opts)
}

// get fails if the object is gone or being deleted.
func (o object) get(ctx context.Context, env *clustertest.Env, ns, name string) error {
	u, err := o.client(env, ns).Get(ctx, name, metav1.GetOptions{})
	if err == nil && u.GetDeletionTimestamp() != nil {
		return fmt.Errorf("%s %s is being deleted", o.kind, name)
	}
	return err
}

func (o object) unlabel(ctx context.Context, env *clustertest.Env, ns, name string) error {
	patch := []byte(`{"metadata":{"labels":{"` + protectionLabel + `":null}}}`)
	_, err := o.client(env, ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// objectNamespace is where a namespaced object goes; "" for a Namespace.
func objectNamespace(t *testing.T, env *clustertest.Env, o object) string {
	if o.kind == "Namespace" {
		return ""
	}
	return env.Namespace(t)
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
}

func TestProtectedDeleteIsDeniedWithTheWayOut(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	for _, o := range objects {
		t.Run(o.kind, func(t *testing.T) {
			ns := objectNamespace(t, env, o)
			name := uniqueName("keep")
			if err := o.create(ctx, env, ns, name, map[string]string{protectionLabel: "Always"}); err != nil {
				t.Fatal(err)
			}
			before := denialCount(t, env, o)

			err := o.delete(ctx, env, ns, name, metav1.DeleteOptions{})
			if !apierrors.IsForbidden(err) {
				t.Fatalf("DELETE of a protected %s: err = %v, want Forbidden", o.kind, err)
			}
			msg := err.Error()
			for _, want := range []string{
				`denied the request`,
				fmt.Sprintf("%s %q", o.resource, name),
				"rampart.io/protection=Always",
				"kubectl label " + nsFlag(ns) + o.resource + "/" + name + " rampart.io/protection-",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("denial %q lacks %q", msg, want)
				}
			}
			if err := o.get(ctx, env, ns, name); err != nil {
				t.Fatalf("protected %s is gone after a denied delete: %v", o.kind, err)
			}
			// The API server may consult the webhook more than once for one
			// DELETE (it re-validates when an optimistic-concurrency retry
			// re-reads the object), so the count rises by at least one.
			if got := denialCount(t, env, o); got < before+1 {
				t.Errorf("rampart_admission_denials_total for %s went from %v to %v, want +1 or more", o.resource, before, got)
			}
			waitDeniedEvent(t, env, ns, name, 1)

			// The way out the message names works: unlabel, then delete.
			if err := o.unlabel(ctx, env, ns, name); err != nil {
				t.Fatal(err)
			}
			if err := o.delete(ctx, env, ns, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete after removing the label: %v", err)
			}
		})
	}
}

func nsFlag(ns string) string {
	if ns == "" {
		return ""
	}
	return "-n " + ns + " "
}

func TestUnprotectedDeletesPass(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	for _, o := range objects {
		t.Run(o.kind, func(t *testing.T) {
			ns := objectNamespace(t, env, o)
			name := uniqueName("plain")
			// Another value of the label, or none, is not protection.
			for i, labels := range []map[string]string{nil, {protectionLabel: "never"}} {
				n := fmt.Sprintf("%s-%d", name, i)
				if err := o.create(ctx, env, ns, n, labels); err != nil {
					t.Fatal(err)
				}
				if err := o.delete(ctx, env, ns, n, metav1.DeleteOptions{}); err != nil {
					t.Fatalf("delete of %s labelled %v: %v", o.kind, labels, err)
				}
			}
		})
	}
}

func TestDryRunIsJudgedWithoutSideEffects(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	o := objects[1] // ConfigMap
	ns := env.Namespace(t)
	if err := o.create(ctx, env, ns, "settings", map[string]string{protectionLabel: "Always"}); err != nil {
		t.Fatal(err)
	}
	err := o.delete(ctx, env, ns, "settings", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("dry-run DELETE of a protected object: err = %v, want the same denial as a real one", err)
	}
	// A real denial afterwards writes exactly one Event: the dry run wrote none.
	if err := o.delete(ctx, env, ns, "settings", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("DELETE: %v", err)
	}
	waitDeniedEvent(t, env, ns, "settings", 1)
	time.Sleep(time.Second) // an Event from the dry run would have landed by now
	if n := deniedEvents(t, env, ns, "settings"); n != 1 {
		t.Fatalf("%d DeleteDenied events after one dry run and one real denial, want 1", n)
	}
}

func TestKubectlDeleteShowsTheReason(t *testing.T) {
	env := clustertest.Get(t)
	name := uniqueName("prod")
	if out, err := env.Kubectl(t, "create", "namespace", name); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := env.Kubectl(t, "label", "namespace", name, "rampart.io/protection=Always"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := env.Kubectl(t, "delete", "namespace", name)
	if err == nil {
		t.Fatalf("kubectl delete of a protected namespace succeeded: %s", out)
	}
	want := "kubectl label namespace/" + name + " rampart.io/protection-"
	if !strings.Contains(out, want) {
		t.Fatalf("kubectl output %q does not tell the user %q", out, want)
	}
	// Following the advice works.
	if out, err := env.Kubectl(t, "label", "namespace/"+name, "rampart.io/protection-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := env.Kubectl(t, "delete", "namespace", name, "--wait=false"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestMalformedReviewGetsAnErrorAndTheServerKeepsServing(t *testing.T) {
	env := clustertest.Get(t)
	// Only the API server may call the webhook: the test presents its
	// certificate.
	client := webhookCaller(t, env, apiServerWebhookCert(t, env))
	for _, body := range []string{"", "{", `{"request":{"uid":"1","operation":"DELETE","oldObject":"not an object"}}`, strings.Repeat("x", 1<<16)} {
		resp, err := client.Post(env.WebhookURL()+rampartadmission.DeletionPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %.20q: %v", body, err)
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var review admissionv1.AdmissionReview
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(data, &review); err != nil || review.Response == nil || review.Response.Allowed || review.Response.Result == nil || review.Response.Result.Code != http.StatusBadRequest {
				t.Errorf("POST %.20q: %s %s, want a 400 result that allows nothing", body, resp.Status, data)
			}
		} else if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %.20q: %s, want 400", body, resp.Status)
		}
	}
	// Still judging real requests.
	ns := env.Namespace(t)
	o := objects[1]
	if err := o.create(context.Background(), env, ns, "c", map[string]string{protectionLabel: "Always"}); err != nil {
		t.Fatal(err)
	}
	if err := o.delete(context.Background(), env, ns, "c", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("after malformed requests: DELETE = %v, want Forbidden", err)
	}
}

func TestManagerElectsALeaderAndServesMetrics(t *testing.T) {
	env := clustertest.Get(t)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := env.Client.CoordinationV1().Leases(localcluster.ManagerNamespace).Get(ctx, "rampart-manager", metav1.GetOptions{})
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatalf("no leader holds the rampart-manager lease: %v", err)
	}
	body := scrape(t, env)
	for _, want := range []string{"controller_runtime_webhook_requests_total", "rampart_admission_denials_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// webhookClient trusts the CA bundle Rampart registered with the API server.
func webhookClient(t *testing.T, env *clustertest.Env) *http.Client {
	t.Helper()
	cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), rampartadmission.ValidatingConfigName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("registered caBundle holds no certificate")
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

func scrape(t *testing.T, env *clustertest.Env) string {
	t.Helper()
	data, err := env.ScrapeManagerMetrics(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// denialCount reads rampart_admission_denials_total for the object's
// resource from the manager's Prometheus endpoint.
func denialCount(t *testing.T, env *clustertest.Env, o object) float64 {
	t.Helper()
	resource := map[string]string{"Namespace": "namespaces", "ConfigMap": "configmaps", "Deployment": "deployments.apps"}[o.kind]
	re := regexp.MustCompile(`(?m)^rampart_admission_denials_total\{resource="` + regexp.QuoteMeta(resource) + `",rule="protection=Always"\} (\S+)$`)
	m := re.FindStringSubmatch(scrape(t, env))
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func deniedEvents(t *testing.T, env *clustertest.Env, ns, name string) int {
	t.Helper()
	evNS := ns
	if evNS == "" {
		evNS = metav1.NamespaceDefault // events about cluster-scoped objects
	}
	list, err := env.Client.EventsV1().Events(evNS).List(context.Background(), metav1.ListOptions{
		FieldSelector: "regarding.name=" + name + ",reason=DeleteDenied",
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n
}

func waitDeniedEvent(t *testing.T, env *clustertest.Env, ns, name string, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return deniedEvents(t, env, ns, name) >= want, nil
	})
	if err != nil {
		t.Fatalf("no DeleteDenied Event for %s/%s: %v", ns, name, err)
	}
}

// Outage: with the manager stopped, nothing unprotected is blocked; what is
// protected fails closed, or, for the label rules the API server enforces
// itself (compiled policies), is judged as Rampart would judge it: Always
// and unconfirmed replica changes refused with Rampart's message, a
// confirmed replica change made.
func TestOutageBlocksOnlyProtectedObjects(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Nodes: 1})
	ctx := context.Background()
	ns := env.Namespace(t)
	cm := objects[1]
	always := map[string]string{protectionLabel: "Always"}
	if err := cm.create(ctx, env, ns, "guarded", always); err != nil {
		t.Fatal(err)
	}
	if err := objects[0].create(ctx, env, "", "guarded-"+ns, always); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), "guarded-"+ns, metav1.DeleteOptions{})
	})
	// With an explicit-replicas workload, the scale webhook is registered.
	keyLabels := map[string]string{protectionLabel: "Always", "rampart.io/explicit-replicas": "true"}
	for name, labels := range map[string]map[string]string{"key": keyLabels, "plain": nil} {
		if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment(name, 1, labels), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	eventually(t, "the scale webhook registered and the label webhooks narrowed to what compiled policies cannot judge", func(ctx context.Context) (bool, error) {
		cfg, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, rampartadmission.ValidatingConfigName, metav1.GetOptions{})
		if err != nil || webhookNamed(cfg, "scale.rampart.io") == nil {
			return false, err
		}
		del := webhookNamed(cfg, "deletion.rampart.io")
		return del != nil && len(del.ObjectSelector.MatchExpressions) == 1 &&
			slices.Equal(del.ObjectSelector.MatchExpressions[0].Values, []string{"Cascading"}), nil
	})
	t.Logf("label webhooks narrowed %v after the test's objects were made", time.Since(start).Round(time.Millisecond))
	// A ProtectionPolicy's static rules are compiled too: its Ready
	// condition says when every API server enforces them.
	policyName := "outage-" + ns
	if err := applyPolicy(t, env, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: %s}
spec:
  protection: Always
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {tier: ledger}}`, policyName, ns)); err != nil {
		t.Fatal(err)
	}
	if err := cm.create(ctx, env, ns, "ledger", map[string]string{"tier": "ledger"}); err != nil {
		t.Fatal(err)
	}
	// At once, before any wait: the policy's webhook holds it.
	if err := cm.delete(ctx, env, ns, "ledger", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a ConfigMap of ProtectionPolicy %s right after it was created: %v; want it refused", policyName, err)
	}
	compiledName := policyName + ".deletion.policy.rampart.io"
	waitPolicyReadySaying(t, env, policyName, "also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy "+compiledName+")")
	if err := env.StopComponent("rampart-manager"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		del  func() error
	}{
		{"ConfigMap", func() error { return cm.delete(ctx, env, ns, "guarded", metav1.DeleteOptions{}) }},
		{"Namespace", func() error { return objects[0].delete(ctx, env, "", "guarded-"+ns, metav1.DeleteOptions{}) }},
		{"Deployment", func() error { return env.Client.AppsV1().Deployments(ns).Delete(ctx, "key", metav1.DeleteOptions{}) }},
	} {
		err := c.del()
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'deletion.rampart.io'") ||
			!strings.Contains(err.Error(), "is protected by label rampart.io/protection") {
			t.Errorf("with Rampart down, deleting an Always-labelled %s: %v; want it refused by the compiled policy with Rampart's message", c.what, err)
		}
	}
	// The policy's webhook fails closed, its compiled policy answers
	// first, with Rampart's message.
	if err := cm.delete(ctx, env, ns, "ledger", metav1.DeleteOptions{}); err == nil || !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+compiledName+"'") || !strings.Contains(err.Error(), "kubectl edit protectionpolicy "+policyName) {
		t.Errorf("with Rampart down, deleting a ConfigMap of ProtectionPolicy %s (Always): %v; want it refused by its compiled policy", policyName, err)
	}
	out, err := env.Kubectl(t, "patch", "-n", ns, "deployment/key", "--type=merge", "-p", `{"spec":{"replicas":0}}`)
	if err == nil || !strings.Contains(out, "ValidatingAdmissionPolicy 'replicas.rampart.io'") || !strings.Contains(out, "needs confirmation") {
		t.Errorf("with Rampart down, an unconfirmed replica change: %v\n%s; want it refused by the compiled policy", err, out)
	}
	if out, err := env.Kubectl(t, "patch", "-n", ns, "deployment/key", "--type=merge", "-p",
		`{"metadata":{"annotations":{"rampart.io/confirm-replicas":"2"}},"spec":{"replicas":2}}`); err != nil {
		t.Errorf("with Rampart down, a confirmed replica change was refused: %v\n%s", err, out)
	}
	if out, err := env.Kubectl(t, "scale", "-n", ns, "deployment/plain", "--replicas=3"); err != nil {
		t.Errorf("with Rampart down, scaling an unguarded deployment failed: %v\n%s", err, out)
	}
	if out, err := env.Kubectl(t, "scale", "-n", ns, "deployment/key", "--replicas=3"); err == nil {
		t.Errorf("with Rampart down, an explicit-replicas deployment was scaled: the scale webhook must fail closed\n%s", out)
	}
	for _, o := range objects {
		n := uniqueName("plain")
		ons := ns
		if o.kind == "Namespace" {
			ons = ""
		}
		if err := o.create(ctx, env, ons, n, nil); err != nil {
			t.Fatal(err)
		}
		if err := o.delete(ctx, env, ons, n, metav1.DeleteOptions{}); err != nil {
			t.Errorf("with Rampart down, deleting an unprotected %s failed: %v", o.kind, err)
		}
	}
	// kube-system keeps working: a controller's lease can be written.
	if _, err := env.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "outage-probe"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("kube-system write with Rampart down: %v", err)
	}
	err = cm.delete(ctx, env, ns, "guarded", metav1.DeleteOptions{})
	if err == nil {
		t.Fatal("with Rampart down, a protected ConfigMap was deleted: the webhook must fail closed")
	}
	if !strings.Contains(err.Error(), "deletion.rampart.io") {
		t.Errorf("fail-closed error %q does not name Rampart's webhook", err)
	}
}

// The generated serving certificate is renewed before it expires, and the
// API server keeps reaching the webhook across renewals.
func TestServingCertificateIsRenewedWhileServing(t *testing.T) {
	// Always stays in the webhook: the API server's own policy would
	// answer the deletes without calling it.
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, ManagerArgs: []string{"--cert-validity=6s", "--compiled-policies=false"}})
	ctx := context.Background()
	ns := env.Namespace(t)
	cm := objects[1]
	if err := cm.create(ctx, env, ns, "guarded", map[string]string{protectionLabel: "Always"}); err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(env.Dir, "manager", "0", "certs", "tls")
	serials := map[string]bool{}
	deadline := time.Now().Add(40 * time.Second)
	for len(serials) < 3 && time.Now().Before(deadline) {
		kp, err := pki.Load(certFile)
		if err == nil {
			serials[kp.Cert.SerialNumber.String()] = true
			if time.Now().After(kp.Cert.NotAfter) {
				t.Fatalf("serving certificate expired at %v without renewal", kp.Cert.NotAfter)
			}
		}
		if err := cm.delete(ctx, env, ns, "guarded", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
			t.Fatalf("during certificate renewal the webhook answered %v, want its denial", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(serials) < 3 {
		t.Fatalf("saw %d serving certificates in 40s with a 6s validity, want renewals", len(serials))
	}
	t.Logf("%d serving certificates seen; every dry-run delete was judged by the webhook", len(serials))
}

// With several manager replicas, the API server spreads admission requests
// over all of them, and every one judges the same way.
func TestSeveralReplicasShareTheWork(t *testing.T) {
	// The label rules stay in the webhooks: this is about the webhook's
	// calls, which the API server's own policies would take over.
	env := clustertest.Start(t, localcluster.Options{Nodes: 1, Managers: 3, ManagerArgs: []string{"--compiled-policies=false"}})
	ctx := context.Background()
	ns := env.Namespace(t)
	cm := objects[1]
	// Requests are spread by the last character of the object's name.
	for i := range 36 {
		name := fmt.Sprintf("guarded-%c", "0123456789abcdefghijklmnopqrstuvwxyz"[i])
		if err := cm.create(ctx, env, ns, name, map[string]string{protectionLabel: "Always"}); err != nil {
			t.Fatal(err)
		}
		err := cm.delete(ctx, env, ns, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("dry-run delete of %s: %v, want a replica's denial", name, err)
		}
	}
	re := regexp.MustCompile(`(?m)^controller_runtime_webhook_requests_total\{code="200",webhook="/validate/deletion"\} (\d+)$`)
	for i := range 3 {
		body, err := env.ScrapeManagerMetrics(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindStringSubmatch(body)
		if m == nil || string(m[1]) == "0" {
			t.Errorf("replica %d judged no deletes: the API server does not spread requests", i)
		} else {
			t.Logf("replica %d judged %s deletes", i, m[1])
		}
	}
	// The CA is shared: the three serving certificates verify against the
	// one registered bundle (or the API server could not have called them).
	sec, err := env.Client.CoreV1().Secrets(localcluster.ManagerNamespace).Get(ctx, "rampart-webhook-ca", metav1.GetOptions{})
	if err != nil || len(sec.Data["ca.crt"]) == 0 {
		t.Fatalf("shared CA secret: %v", err)
	}
}
