package admission_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/api/v1alpha1"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/pki"
	pub "github.com/rampart-io/rampart/internal/protection/budget/admit"
	flowcontrol "github.com/rampart-io/rampart/internal/protection/flowcontrol/admit"
)

// webhookCaller posts admission reviews straight to the manager's webhook
// port, trusting the registered CA bundle and presenting cert (none when
// nil), as something other than the API server would.
func webhookCaller(t *testing.T, env *clustertest.Env, cert *pki.KeyPair, tweak ...func(*tls.Config)) *http.Client {
	t.Helper()
	c := webhookClient(t, env)
	cfg := c.Transport.(*http.Transport).TLSClientConfig
	if cert != nil {
		// Presented whatever CAs the server names, as an attacker would.
		pair := &tls.Certificate{Certificate: [][]byte{cert.Cert.Raw}, PrivateKey: cert.Key, Leaf: cert.Cert}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair, nil }
	}
	for _, f := range tweak {
		f(cfg)
	}
	return c
}

// apiServerWebhookCert is the client certificate the local API servers
// present to webhooks.
func apiServerWebhookCert(t *testing.T, env *clustertest.Env) *pki.KeyPair {
	t.Helper()
	kp, err := pki.Load(env.PKIFile("apiserver-webhook-client"))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// adminCert is the cluster admin's client certificate (cluster CA).
func adminCert(t *testing.T, env *clustertest.Env) *pki.KeyPair {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	kp, err := pki.Parse(user.ClientCertificateData, user.ClientKeyData)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// deleteReview is a DELETE review of obj (a pod or a config map) by user.
func deleteReview(t *testing.T, obj runtime.Object, resource, ns, name, user string) []byte {
	t.Helper()
	kind := map[string]string{"pods": "Pod", "configmaps": "ConfigMap", "secrets": "Secret"}[resource]
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: kind})
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(fmt.Sprintf("forged-%d", time.Now().UnixNano())),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: kind},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: resource},
			Namespace: ns, Name: name, Operation: admissionv1.Delete,
			UserInfo:  authenticationv1.UserInfo{Username: user},
			OldObject: runtime.RawExtension{Raw: raw},
			Options:   runtime.RawExtension{Raw: []byte(`{"apiVersion":"meta.k8s.io/v1","kind":"DeleteOptions"}`)},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// post sends a review and returns the HTTP status (0 when the connection
// failed), the review's answer if any, and the error or body.
func post(c *http.Client, url string, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var review admissionv1.AdmissionReview
	if resp.StatusCode == http.StatusOK && json.Unmarshal(data, &review) == nil {
		return resp.StatusCode, review.Response, string(data)
	}
	return resp.StatusCode, nil, string(data)
}

func getFlowControl(t *testing.T, env *clustertest.Env, name string) *v1alpha1.DeletionFlowControl {
	t.Helper()
	u, err := env.Dynamic.Resource(flowControls).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fc := &v1alpha1.DeletionFlowControl{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, fc); err != nil {
		t.Fatal(err)
	}
	return fc
}

// counted is the deletes the flow control's one limit has counted.
func counted(fc *v1alpha1.DeletionFlowControl) int32 {
	var n int32
	for _, b := range fc.Status.Buckets {
		for _, s := range b.Slots {
			n += s.Count
		}
	}
	return n
}

// rampartEvents counts the Events Rampart wrote in ns.
func rampartEvents(t *testing.T, env *clustertest.Env, ns string) int {
	t.Helper()
	list, err := env.Client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if strings.Contains(e.ReportingController, "rampart") || strings.HasPrefix(e.Reason, "Disruption") || strings.HasPrefix(e.Reason, "Breaker") {
			n++
		}
	}
	return n
}

// Only the API server may call the webhooks. Reviews posted straight to
// the webhook port without the API server's client certificate are
// refused before any is read, and change nothing: a budget and a flow
// control keep their status, no Event, no recentDenied entry. The same
// review with the API server's certificate is judged (it consumes the
// budget), and the API server's own calls go on being judged.
func TestForgedReviewsAreRefusedAndConsumeNothing(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	web := map[string]string{"app": "forge-web"}
	createPods(t, env, ns, "web", 3, web, nil)
	env.WaitPodsRunning(t, ns, "app=forge-web", 3, time.Minute)
	createBudget(t, env, ns, "web", `{selector: {matchLabels: {app: forge-web}}, maxUnavailable: 1}`)
	waitBudget(t, env, ns, "web", 30*time.Second, func(s v1alpha1.PodUnavailableBudgetStatus) bool {
		return s.TotalReplicas == 3 && s.UnavailableAllowed == 1
	})
	fcName := "forge-" + ns
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: DeletionFlowControl
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  limits: [{count: 5, window: 10m}]`, fcName, ns)), &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(flowControls).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(flowControls).Delete(context.Background(), fcName, metav1.DeleteOptions{})
	})
	pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms := bareConfigMaps(t, env, ns, 7)
	eventsBefore := rampartEvents(t, env, ns)

	otherCA, err := pki.NewCA("intruder-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCACert, err := otherCA.Issue(pki.Request{CommonName: localcluster.WebhookClientName, Client: true, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The right CA, the wrong name: only an admin who holds the CA's key
	// could issue it, but --webhook-client-names still refuses it.
	clientCA, err := pki.Load(env.PKIFile("webhook-client-ca"))
	if err != nil {
		t.Fatal(err)
	}
	wrongName, err := clientCA.Issue(pki.Request{CommonName: "intruder", Client: true, Now: time.Now(), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	base := env.WebhookURL()
	for _, c := range []struct {
		name string
		cert *pki.KeyPair
		// want is the HTTP status, 0 for a refused handshake.
		want int
	}{
		{"no client certificate", nil, http.StatusUnauthorized},
		{"a certificate of another CA", otherCACert, 0},
		{"the cluster admin's certificate (cluster CA)", adminCert(t, env), 0},
		{"the client CA, a name not allowed", wrongName, http.StatusForbidden},
	} {
		caller := webhookCaller(t, env, c.cert)
		for i := range 2 {
			code, resp, detail := post(caller, base+pub.Path, deleteReview(t, pod, "pods", ns, "web-0", "forger"))
			if code != c.want || resp != nil {
				t.Errorf("%s: forged budget review %d answered %d %s, want %d and no review", c.name, i, code, detail, c.want)
			}
			if i == 0 {
				t.Logf("%s: %d %s", c.name, code, strings.TrimSpace(detail))
			}
		}
		for i, name := range cms {
			cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			code, resp, detail := post(caller, base+flowcontrol.Prefix+fcName, deleteReview(t, cm, "configmaps", ns, name, "forger"))
			if code != c.want || resp != nil {
				t.Errorf("%s: forged flow control review %d answered %d %s, want %d and no review", c.name, i, code, detail, c.want)
			}
		}
	}
	t.Run("the forged reviews changed nothing", func(t *testing.T) {
		if s := getBudget(t, env, ns, "web").Status; s.UnavailableAllowed != 1 || len(s.Disruptions) != 0 {
			t.Errorf("budget after forged reviews: allowed %d, disruptions %v; want 1 and none", s.UnavailableAllowed, s.Disruptions)
		}
		fc := getFlowControl(t, env, fcName)
		if n := counted(fc); n != 0 || len(fc.Status.RecentDenied) != 0 || fc.Status.Breaker.State == "Open" {
			t.Errorf("flow control after forged reviews: %d counted, recentDenied %v, breaker %q; want none", n, fc.Status.RecentDenied, fc.Status.Breaker.State)
		}
		if n := rampartEvents(t, env, ns); n != eventsBefore {
			t.Errorf("forged reviews left %d Events", n-eventsBefore)
		}
	})
	t.Run("a client offering only CBC-SHA1 suites cannot connect, even with the API server's certificate", func(t *testing.T) {
		caller := webhookCaller(t, env, apiServerWebhookCert(t, env), func(c *tls.Config) {
			c.MaxVersion = tls.VersionTLS12
			c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
				tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}
		})
		code, _, detail := post(caller, base+pub.Path, deleteReview(t, pod, "pods", ns, "web-0", "forger"))
		if code != 0 {
			t.Errorf("a CBC-SHA1-only client got an answer: %d %s", code, detail)
		}
		t.Logf("CBC-SHA1 only: %s", detail)
		ok := webhookCaller(t, env, apiServerWebhookCert(t, env), func(c *tls.Config) {
			c.MaxVersion = tls.VersionTLS12
			c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
		})
		cfg := ok.Transport.(*http.Transport).TLSClientConfig
		conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), cfg)
		if err != nil {
			t.Fatalf("TLS 1.2 with ECDHE-ECDSA-AES128-GCM-SHA256: %v", err)
		}
		_ = conn.Close()
	})
	t.Run("the same reviews with the API server's certificate are judged", func(t *testing.T) {
		caller := webhookCaller(t, env, apiServerWebhookCert(t, env))
		code, resp, detail := post(caller, base+pub.Path, deleteReview(t, pod, "pods", ns, "web-0", "control"))
		if code != http.StatusOK || resp == nil || !resp.Allowed {
			t.Fatalf("budget review with the API server's certificate: %d %s, want it admitted", code, detail)
		}
		if s := getBudget(t, env, ns, "web").Status; len(s.Disruptions) != 1 {
			t.Errorf("an admitted review did not consume the budget: %+v (so the forged ones proved nothing)", s)
		}
		cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, cms[0], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		code, resp, detail = post(caller, base+flowcontrol.Prefix+fcName, deleteReview(t, cm, "configmaps", ns, cms[0], "control"))
		if code != http.StatusOK || resp == nil || !resp.Allowed {
			t.Fatalf("flow control review with the API server's certificate: %d %s, want it admitted", code, detail)
		}
		if n := counted(getFlowControl(t, env, fcName)); n != 1 {
			t.Errorf("an admitted review counted %d deletes, want 1", n)
		}
	})
	t.Run("the API server's own calls are still judged", func(t *testing.T) {
		o := objects[1]
		if err := o.create(ctx, env, ns, "guarded", map[string]string{protectionLabel: "Always"}); err != nil {
			t.Fatal(err)
		}
		if err := o.delete(ctx, env, ns, "guarded", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("protected delete through the API server: %v, want Forbidden", err)
		}
	})
	if t.Failed() {
		logs, _ := os.ReadFile(env.Dir + "/logs/rampart-manager.log")
		t.Logf("manager log tail:\n%s", tail(string(logs), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
