package admission_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestDenialNamesCoreResourcesAsDiscoveryDoes: the way out a denial gives
// names the resource as the API server's discovery does ("endpoints", not
// "endpoint"), and kubectl accepts it as written.
func TestDenialNamesCoreResourcesAsDiscoveryDoes(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	name := uniqueName("db")
	manifest := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Endpoints
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels:
    rampart.io/protection: Always
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(t, "create", "-f", manifest); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := env.Kubectl(t, "delete", "-n", ns, "endpoints", name)
	if err == nil {
		t.Fatalf("kubectl delete of protected endpoints succeeded: %s", out)
	}
	for _, want := range []string{`endpoints "` + name + `"`, "kubectl label -n " + ns + " endpoints/" + name + " rampart.io/protection-"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl output %q does not say %q", out, want)
		}
	}
	// The advice, as written, works.
	if out, err := env.Kubectl(t, "label", "-n", ns, "endpoints/"+name, "rampart.io/protection-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := env.Kubectl(t, "delete", "-n", ns, "endpoints", name); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}
