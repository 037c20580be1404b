package compiled_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

const exportTestPolicies = `
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: payments}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  objectSelector: {matchLabels: {tier: payments}}
  protection: Always
  exempt: {users: [release-bot]}
---
apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: trial}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  objectSelector: {matchLabels: {tier: trial}}
  protection: Always
  mode: Warn
`

// exportTestCRD is a CRD whose scale subresource keeps replicas at
// .spec.size: with -f, the CRDs in the files are compiled.
const exportTestCRD = `{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: pools.export.example.com},
  spec: {group: export.example.com, names: {plural: pools, singular: pool, kind: Pool, listKind: PoolList}, scope: Namespaced,
    versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}},
      subresources: {scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.size}}}]}}
`

// TestExportedPoliciesHoldWithoutRampart installs no Rampart at all: the
// rules come from `rampart export policies`, applied with kubectl, and the
// API server alone enforces them. Always-labelled Namespace, ConfigMap and
// Deployment cannot be deleted, an unconfirmed replica change of an
// explicit-replicas Deployment, or of a custom resource whose CRD keeps
// its replicas at .spec.size, is refused and a confirmed one goes
// through, a policy's exemption and Warn mode hold, and unprotected
// objects pass.
func TestExportedPoliciesHoldWithoutRampart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	env := clustertest.Start(t, localcluster.Options{Unprotected: true})
	ctx := context.Background()
	kubectl := func(args ...string) (string, error) { return env.Kubectl(t, args...) }
	must := func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	refused := func(what, out string, err error, wantIn ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s went through; want it refused by a compiled policy:\n%s", what, out)
		}
		for _, w := range wantIn {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the refusal does not say %q:\n%s", what, w, out)
			}
		}
	}

	ns := env.Namespace(t)
	precious := "precious-" + ns
	must(kubectl("create", "namespace", precious))
	must(kubectl("label", "namespace", precious, "rampart.io/protection=Always"))
	must(kubectl("-n", ns, "create", "configmap", "keep"))
	must(kubectl("-n", ns, "label", "configmap", "keep", "rampart.io/protection=Always"))
	must(kubectl("-n", ns, "create", "configmap", "free"))
	must(kubectl("-n", ns, "create", "configmap", "ledger"))
	must(kubectl("-n", ns, "label", "configmap", "ledger", "tier=payments"))
	must(kubectl("-n", ns, "create", "configmap", "flags"))
	must(kubectl("-n", ns, "label", "configmap", "flags", "tier=trial"))
	must(kubectl("-n", ns, "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=3"))
	must(kubectl("-n", ns, "label", "deployment", "web", "rampart.io/protection=Always", "rampart.io/explicit-replicas=true"))
	must(kubectl("-n", ns, "create", "deployment", "loose", "--image=registry.k8s.io/pause:3.10", "--replicas=3"))
	crdFile := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(crdFile, []byte(exportTestCRD), 0o600); err != nil {
		t.Fatal(err)
	}
	must(kubectl("apply", "-f", crdFile))
	must(kubectl("wait", "--for=condition=Established", "crd/pools.export.example.com"))
	pool := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(pool, []byte("apiVersion: export.example.com/v1\nkind: Pool\nmetadata: {name: db, labels: {rampart.io/explicit-replicas: \"true\"}}\nspec: {size: 3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(kubectl("-n", ns, "create", "-f", pool))

	// rampart export policies -f policies.yaml | kubectl apply -f -
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(file, []byte(exportTestPolicies), 0o600); err != nil {
		t.Fatal(err)
	}
	export := exec.Command(rampart, "export", "policies", "-f", file, "-f", crdFile)
	yaml, err := export.Output()
	if err != nil {
		t.Fatalf("rampart export policies: %v", err)
	}
	apply := exec.Command(env.KubectlPath(), "--kubeconfig", env.Kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(string(yaml))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}

	// The API server loads policies on a one-second tick, from informers
	// that see them in the order kubectl applied them: a dry run that the
	// export's LAST policy answers proves them all in force, as the help
	// says. (Proving the first one is not enough: the rest can land one
	// tick later; the payments policy once let its ConfigMap go so.) The
	// last is the Warn-mode trial policy, so the probe is counted as one
	// warning.
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, _ := kubectl("-n", ns, "delete", "configmap", "flags", "--dry-run=server")
		return strings.Contains(out, "rampart (Warn mode)"), nil
	})
	if err != nil {
		t.Fatal("the compiled policies were never enforced")
	}
	t.Logf("in force %v after kubectl apply returned", time.Since(start).Round(time.Millisecond))

	out, err := kubectl("-n", ns, "delete", "configmap", "keep")
	refused("deleting an Always-labelled ConfigMap", out, err,
		`ValidatingAdmissionPolicy 'deletion.rampart.io'`, `configmap "keep" in namespace "`+ns+`" is protected by label rampart.io/protection`,
		"kubectl label -n "+ns+" configmap/keep rampart.io/protection-")
	t.Logf("kubectl delete configmap keep:\n%s", out)
	out, err = kubectl("delete", "namespace", precious)
	refused("deleting an Always-labelled Namespace", out, err,
		`namespace "`+precious+`" is protected by label rampart.io/protection`, "kubectl label namespace/"+precious+" rampart.io/protection-")
	out, err = kubectl("-n", ns, "delete", "deployment", "web")
	refused("deleting an Always-labelled Deployment", out, err, `deployments.apps "web" in namespace "`+ns+`"`)
	must(kubectl("-n", ns, "delete", "configmap", "free"))
	must(kubectl("-n", ns, "delete", "deployment", "loose"))

	out, err = kubectl("-n", ns, "patch", "deployment", "web", "--type=merge", "-p", `{"spec":{"replicas":0}}`)
	refused("an unconfirmed replica change", out, err, `ValidatingAdmissionPolicy 'replicas.rampart.io'`,
		`changing the replicas of deployments.apps "web" in namespace "`+ns+`" from 3 to 0 needs confirmation`,
		`Set annotation rampart.io/confirm-replicas="0" in the same request, or run: kubectl rampart scale -n `+ns+` deployments.apps/web --replicas 0`)
	out, err = kubectl("-n", ns, "patch", "deployment", "web", "--type=merge", "-p",
		`{"metadata":{"annotations":{"rampart.io/confirm-replicas":"2"}},"spec":{"replicas":0}}`)
	refused("a replica change confirming another count", out, err, `which is not the new count 0`)
	must(kubectl("-n", ns, "patch", "deployment", "web", "--type=merge", "-p",
		`{"metadata":{"annotations":{"rampart.io/confirm-replicas":"1"}},"spec":{"replicas":1}}`))
	d, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Fatalf("the confirmed change to 1 replica was not made: %v %v", err, d.Spec.Replicas)
	}
	out, err = kubectl("-n", ns, "patch", "pools.export.example.com", "db", "--type=merge", "-p", `{"spec":{"size":0}}`)
	refused("an unconfirmed change of a custom resource's size", out, err, `ValidatingAdmissionPolicy 'pools.export.example.com.replicas.rampart.io'`,
		`changing the replicas of pools.export.example.com "db" in namespace "`+ns+`" from 3 to 0 needs confirmation`)
	must(kubectl("-n", ns, "patch", "pools.export.example.com", "db", "--type=merge", "-p",
		`{"metadata":{"annotations":{"rampart.io/confirm-replicas":"1"}},"spec":{"size":1}}`))
	if out := must(kubectl("-n", ns, "get", "pools.export.example.com", "db", "-o", "jsonpath={.spec.size}")); out != "1" {
		t.Errorf("the confirmed change of the size to 1 was not made: size %s", out)
	}

	out, err = kubectl("-n", ns, "delete", "configmap", "ledger")
	refused("deleting a ConfigMap a policy protects", out, err, `ValidatingAdmissionPolicy 'payments.deletion.policy.rampart.io'`,
		`is protected by ProtectionPolicy "payments"`, "kubectl edit protectionpolicy payments")
	must(kubectl("-n", ns, "delete", "configmap", "ledger", "--as", "release-bot", "--as-group", "system:masters"))
	out = must(kubectl("-n", ns, "delete", "configmap", "flags"))
	if !strings.Contains(out, "rampart (Warn mode)") || !strings.Contains(out, `ProtectionPolicy "trial"`) {
		t.Errorf("a Warn-mode policy's delete went through without its warning:\n%s", out)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Get(ctx, "keep", metav1.GetOptions{}); err != nil {
		t.Errorf("the protected ConfigMap is gone: %v", err)
	}

	// rampart status counts what the compiled policies denied and warned
	// about, from the API server's own metric: Rampart saw none of it.
	status, err := exec.Command(rampart, "status", "--kubeconfig", env.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("rampart status: %v\n%s", err, status)
	}
	for _, re := range []string{
		`(?m)^deletion\.rampart\.io\s+labels\s+Deny\s+3\s+0$`, // keep, the namespace, web
		`(?m)^replicas\.rampart\.io\s+labels\s+Deny\s+2\s+0$`,
		`(?m)^pools\.export\.example\.com\.replicas\.rampart\.io\s+labels\s+Deny\s+1\s+0$`,
		`(?m)^payments\.deletion\.policy\.rampart\.io\s+payments\s+Deny\s+1\s+0$`,
		`(?m)^trial\.deletion\.policy\.rampart\.io\s+trial\s+Warn\s+0\s+2$`, // the probe's dry run and the delete
	} {
		if !regexp.MustCompile(re).Match(status) {
			t.Errorf("rampart status does not match %s:\n%s", re, status)
		}
	}
	t.Logf("rampart status:\n%s", status)

	// What `kubectl get validatingadmissionpolicies -l ...` shows, and
	// removing them all with one command lifts the protection.
	out = must(kubectl("get", "validatingadmissionpolicies", "-l", "app.kubernetes.io/managed-by=rampart", "-o", "name"))
	for _, want := range []string{"deletion.rampart.io", "replicas.rampart.io", "payments.deletion.policy.rampart.io", "trial.deletion.policy.rampart.io"} {
		if !strings.Contains(out, "/"+want+"\n") {
			t.Errorf("compiled policy %s not installed:\n%s", want, out)
		}
	}
	must(kubectl("delete", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-l", "app.kubernetes.io/managed-by=rampart"))
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := kubectl("-n", ns, "delete", "configmap", "keep", "--dry-run=server")
		return err == nil, nil
	})
	if err != nil {
		t.Error("the policies still hold after they were deleted")
	}
	_ = env.Client.CoreV1().Namespaces().Delete(ctx, precious, metav1.DeleteOptions{})
}
