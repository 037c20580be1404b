package admit_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/compiled"
)

// The policy guards the replicas of gauges.late.example.com, a custom
// resource whose CRD does not exist yet.
const latePolicy = `{apiVersion: rampart.io/v1alpha1, kind: ProtectionPolicy, metadata: {name: gauges},
  spec: {resources: [{apiGroups: [late.example.com], resources: [gauges]}], explicitReplicas: {guard: ToZero}}}
`

// lateCRD has a scale subresource: the policy's replicas rule on its
// custom resources can be compiled.
const lateCRD = `{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: gauges.late.example.com},
  spec: {group: late.example.com, names: {plural: gauges, singular: gauge, kind: Gauge, listKind: GaugeList}, scope: Namespaced,
    versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}},
      subresources: {scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}}]}}
`

// The manager may list what it guards, as the chart's install asks of an
// operator for custom resources.
const lateRights = `{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: rampart-manager-late},
  rules: [{apiGroups: [late.example.com], resources: ["*"], verbs: [list, watch]}]}
---
{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding, metadata: {name: rampart-manager-late},
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rampart-manager-late},
  subjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: ` + localcluster.ManagerUser + `}]}
`

// A ProtectionPolicy's Ready message follows the CRDs of the custom
// resources it covers, created and deleted after the policy: once the
// CRD exists, `kubectl get` shows the policy's replicas rule also
// enforced by the API server (its compiled ValidatingAdmissionPolicy);
// once the CRD is gone, the message no longer names that policy.
func TestReadyFollowsACRDCreatedAfterThePolicy(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{})
	dir := t.TempDir()
	apply := func(name, manifest string) {
		t.Helper()
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := env.Kubectl(t, "apply", "-f", file); err != nil {
			t.Fatalf("kubectl apply %s: %v\n%s", name, err, out)
		}
	}
	// What `kubectl get protectionpolicy gauges` shows of Ready.
	ready := func() string {
		out, _ := env.Kubectl(t, "get", "protectionpolicy", "gauges", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}`)
		return out
	}
	var seen []string
	last := ""
	waitReady := func(what string, ok func(string) bool) time.Duration {
		t.Helper()
		start := time.Now()
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			got := ready()
			if got != last {
				seen, last = append(seen, got), got
			}
			return ok(got), nil
		})
		if err != nil {
			t.Fatalf("waiting for Ready %s: the policy's Ready shows %q; it showed, in turn:\n%s", what, last, strings.Join(seen, "\n"))
		}
		return time.Since(start)
	}
	vap := compiled.ScaledReplicasName("gauges", "gauges.late.example.com")
	withoutCRD := func(got string) bool {
		return strings.HasPrefix(got, "True ") && strings.HasSuffix(got, "; enforced")
	}

	apply("rights.yaml", lateRights)
	apply("policy.yaml", latePolicy)
	waitReady("True before the CRD exists, nothing compiled for it", withoutCRD)

	apply("crd.yaml", lateCRD)
	took := waitReady("to name "+vap+" in force once the CRD exists", func(got string) bool {
		return strings.HasPrefix(got, "True ") &&
			strings.HasSuffix(got, "; its static rules also enforced by the API server itself, without Rampart (ValidatingAdmissionPolicy "+vap+")")
	})
	t.Logf("Ready named %s in force %v after its CRD was created", vap, took.Round(time.Millisecond))

	if out, err := env.Kubectl(t, "delete", "crd", "gauges.late.example.com"); err != nil {
		t.Fatalf("kubectl delete crd: %v\n%s", err, out)
	}
	took = waitReady("to name no compiled policy once the CRD is gone", withoutCRD)
	t.Logf("Ready named no compiled policy %v after its CRD was deleted", took.Round(time.Millisecond))
	t.Logf("Ready showed, in turn:\n%s", strings.Join(seen, "\n"))
}
