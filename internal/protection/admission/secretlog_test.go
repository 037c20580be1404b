package admission_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// No secret reaches a log: a protected Secret's DELETE sends its whole
// data to the webhook (as oldObject), and is denied; a denied dry run and
// a direct hostile review carry it too. Then neither the component logs
// nor the audit log hold the Secret's value, a key of the cluster, a PEM
// private key or a token (hack/secret-scan.sh, which `make test` also runs
// over the logs of every cluster the tests started).
func TestNoSecretInTheLogs(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	canary := "rampart-canary-" + strings.ToLower(rand.String(12))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{protectionLabel: "Always"},
			Annotations: map[string]string{"note": canary + "-annotation"}},
		StringData: map[string]string{"password": canary},
	}
	if _, err := env.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := env.Client.CoreV1().Secrets(ns).Delete(ctx, "db", metav1.DeleteOptions{})
	mustForbid(t, err, "rampart.io/protection=Always")
	err = env.Client.CoreV1().Secrets(ns).Delete(ctx, "db", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	mustForbid(t, err, "rampart.io/protection=Always")
	if err := env.Client.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err == nil {
		t.Fatal("a DeleteCollection took the protected Secret")
	}
	// The webhook also gets it from a caller that is not the API server.
	caller := webhookCaller(t, env, apiServerWebhookCert(t, env))
	live, err := env.Client.CoreV1().Secrets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Data["token"] = []byte("Bearer " + canary)
	if code, resp, detail := post(caller, env.WebhookURL()+"/validate/deletion", deleteReview(t, live, "secrets", ns, "db", "mallory")); code == 0 || (resp != nil && resp.Allowed) {
		t.Fatalf("direct review: HTTP %d %s", code, detail)
	}
	scan := filepath.Join("..", "..", "..", "hack", "secret-scan.sh")
	// The scan finds what it looks for: the canary planted in a log.
	planted := t.TempDir()
	if err := os.MkdirAll(filepath.Join(planted, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(planted, "logs", "x.log"), []byte("I1123 value="+canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", scan, planted).CombinedOutput(); err == nil {
		t.Fatalf("the scan missed a planted canary: %s", out)
	}
	out, err := exec.Command("bash", scan, env.Dir).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("a secret reached a log: %v", err)
	}
	if !strings.Contains(string(out), "0 secrets found") {
		t.Fatalf("the scan did not run: %s", out)
	}
}
