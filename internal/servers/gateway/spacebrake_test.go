package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/space"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

// TestEtcdSpaceBrake: the report the manager publishes says etcd's
// fullest member is at 95% of its quota (written here, through the
// gateway, whose answer holds until the gateway's watch has read it). At
// once, a user's ConfigMap create through the gateway is refused with 429
// and the way out, while the same user's update, delete and eviction
// pass, a node's Lease create and update pass, and a kube-system service
// account's create in kube-system passes. Once the report falls under the
// share, the user's create passes again.
func TestEtcdSpaceBrake(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	admin := clientFor(t, viaGateway(t, env))
	reports := admin.CoreV1().ConfigMaps(localcluster.ManagerNamespace)
	publish := func(share float64, level space.Level) {
		t.Helper()
		const quota = 2 << 30
		raw, err := json.Marshal(space.Report{
			Verdict: space.Verdict{Level: level, Share: share, Fullest: space.Member{Name: "etcd-0", DBSize: int64(share * quota), Quota: quota}},
			Written: []space.Grown{{Prefix: "/registry/configmaps/" + ns + "/", Keys: 900, Bytes: 600 << 20}, {Prefix: "/registry/events/" + ns + "/", Keys: 9000, Bytes: 40 << 20}},
			At:      time.Now(), Every: 30 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: space.ReportConfigMap}, Data: map[string]string{space.ReportKey: string(raw)}}
		if _, err := reports.Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = reports.Create(ctx, cm, metav1.CreateOptions{})
		} else if err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = reports.Delete(ctx, space.ReportConfigMap, metav1.DeleteOptions{}) })

	const user = "brake-user"
	grant(t, env, "brake-user", user,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "update", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}})
	alice := clientFor(t, userConfig(t, env, user)).CoreV1().ConfigMaps(ns)
	if _, err := alice.Create(ctx, configMap("before"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a create before the brake: %v", err)
	}
	systemSA := kubeSystemServiceAccount(t, env)

	publish(0.95, space.Warning)
	if v := metric(scrape(t, env), "rampart_gateway_etcd_space_brake"); v != 1 {
		t.Fatalf("rampart_gateway_etcd_space_brake = %v once the report written through the gateway was answered, want 1", v)
	}
	_, err := alice.Create(ctx, configMap("during"), metav1.CreateOptions{})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("a user's create while etcd is at 95%%: %v, want 429", err)
	}
	if _, delay := apierrors.SuggestsClientDelay(err); delay {
		t.Errorf("the refusal suggests a retry delay: client-go would retry it by itself")
	}
	for _, want := range []string{"95%", "2048.0 MiB quota", "from 90%", "/registry/configmaps/" + ns + "/ (600.0 MiB)", "rampart etcd space recover --dir DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := alice.Create(ctx, configMap("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a dry-run create while braking: %v", err)
	}
	before, err := alice.Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before.Data = map[string]string{"k": "v"}
	if _, err := alice.Update(ctx, before, metav1.UpdateOptions{}); err != nil {
		t.Errorf("a user's update while braking: %v", err)
	}
	if err := alice.Delete(ctx, "before", metav1.DeleteOptions{}); err != nil {
		t.Errorf("a user's delete while braking: %v", err)
	}
	// A drain's eviction is a create of pods/eviction: the API server
	// answers it (no such pod), not the brake.
	err = clientFor(t, userConfig(t, env, user)).PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "no-such-pod", Namespace: ns}})
	if !apierrors.IsNotFound(err) {
		t.Errorf("an eviction while braking: %v, want the API server's NotFound", err)
	}

	// A node renews its lease: create, then update.
	leases := clientFor(t, userConfig(t, env, "system:node:brake-node", "system:nodes")).CoordinationV1().Leases("kube-node-lease")
	lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "brake-node"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("brake-node"), LeaseDurationSeconds: ptr.To[int32](40)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a node's Lease create while braking: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoordinationV1().Leases("kube-node-lease").Delete(ctx, "brake-node", metav1.DeleteOptions{})
	})
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Errorf("a node's Lease update while braking: %v", err)
	}
	if _, err := systemSA.CoreV1().ConfigMaps("kube-system").Create(ctx, configMap("brake-system"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a kube-system service account's create in kube-system while braking: %v", err)
	}
	_ = env.Client.CoreV1().ConfigMaps("kube-system").Delete(ctx, "brake-system", metav1.DeleteOptions{})

	publish(0.5, space.OK)
	if v := metric(scrape(t, env), "rampart_gateway_etcd_space_brake"); v != 0 {
		t.Errorf("rampart_gateway_etcd_space_brake = %v once the report says 50%%, want 0", v)
	}
	if _, err := alice.Create(ctx, configMap("after"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a user's create once etcd is at 50%%: %v", err)
	}
	metrics := scrape(t, env)
	if v := metric(metrics, `rampart_gateway_etcd_space_brake_refusals_total{resource="configmaps"}`); v < 1 {
		t.Errorf("rampart_gateway_etcd_space_brake_refusals_total{resource=configmaps} = %v, want at least 1", v)
	}
	if v := metric(metrics, `rampart_gateway_rejections_total{policy="none",reason="etcd-space"}`); v < 1 {
		t.Errorf(`rampart_gateway_rejections_total{reason="etcd-space"} = %v, want at least 1`, v)
	}
}

// kubeSystemServiceAccount is a client through the gateway as a service
// account of kube-system (its token), which may create ConfigMaps there.
func kubeSystemServiceAccount(t *testing.T, env *clustertest.Env) *kubernetes.Clientset {
	t.Helper()
	ctx := context.Background()
	const name = "brake-test"
	sas := env.Client.CoreV1().ServiceAccounts("kube-system")
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sas.Delete(ctx, name, metav1.DeleteOptions{}) })
	grant(t, env, "brake-kube-system", "system:serviceaccount:kube-system:"+name,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}})
	tok, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: env.GatewayURL(), QPS: -1, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: env.PKIFile("ca.crt")}}
	return clientFor(t, cfg)
}
