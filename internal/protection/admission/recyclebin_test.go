package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/etcdtool/source"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// kept are the recycle bin's entries for one object UID.
func kept(t *testing.T, env *clustertest.Env, ns string, uid types.UID) []recyclebin.Entry {
	t.Helper()
	bin, err := env.RecycleBin()
	if err != nil {
		t.Fatal(err)
	}
	listed, err := bin.List(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	var out []recyclebin.Entry
	for _, l := range listed {
		if l.UID != uid {
			continue
		}
		e, err := bin.Get(context.Background(), l.StoreName)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// waitKeptState waits until the one entry of uid is in state.
func waitKeptState(t *testing.T, env *clustertest.Env, ns string, uid types.UID, state string) {
	t.Helper()
	eventually(t, "the recycle bin's copy of "+string(uid)+" to be "+state, func(context.Context) (bool, error) {
		es := kept(t, env, ns, uid)
		return len(es) == 1 && es[0].State == state, nil
	})
}

// The recycle bin keeps a protected object before its delete is admitted:
// the copy is on the store when the DELETE returns, names who deleted it,
// and is settled as Deleted; a dry run and an unprotected object leave
// nothing; each item of a DeleteCollection is kept; a Secret is kept
// sealed, never in clear.
func TestRecycleBinKeepsAProtectedObjectBeforeItsDelete(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prices", Labels: cascading}, Data: map[string]string{"apple": "3"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "prices", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run delete: %v", err)
	}
	if es := kept(t, env, ns, cm.UID); len(es) != 0 {
		t.Fatalf("a dry run was kept: %+v", es)
	}
	if err := cms.Delete(ctx, "prices", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete of a Cascading ConfigMap with nothing depending on it: %v", err)
	}
	// At once: the copy was stored before the delete was admitted.
	es := kept(t, env, ns, cm.UID)
	if len(es) != 1 {
		t.Fatalf("right after the delete the bin holds %d copies of it, want 1", len(es))
	}
	e := es[0]
	var got corev1.ConfigMap
	if err := json.Unmarshal(e.Object, &got); err != nil || got.Data["apple"] != "3" || got.Name != "prices" {
		t.Fatalf("kept object %s (%v), want the ConfigMap as it was", e.Object, err)
	}
	if e.How != recyclebin.HowAPI || e.DeletedBy == "" || e.Kind != "ConfigMap" || e.Resource.Resource != "configmaps" {
		t.Errorf("entry %+v: want deleted through the API, by the test's user, as a ConfigMap", e)
	}
	waitKeptState(t, env, ns, cm.UID, recyclebin.StateDeleted)

	// Unprotected: nothing kept.
	plain, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if es := kept(t, env, ns, plain.UID); len(es) != 0 {
		t.Fatalf("an unprotected ConfigMap was kept: %+v", es)
	}

	// Each item of a DeleteCollection.
	var uids []types.UID
	for _, name := range []string{"batch-a", "batch-b"} {
		c, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{protectionLabel: "Cascading", "batch": "yes"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, c.UID)
	}
	if err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "batch=yes"}); err != nil {
		t.Fatalf("DeleteCollection: %v", err)
	}
	for _, uid := range uids {
		if es := kept(t, env, ns, uid); len(es) != 1 {
			t.Errorf("DeleteCollection item %s: %d copies kept, want 1", uid, len(es))
		}
	}

	// A Secret: sealed on the store.
	secret, err := env.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: cascading},
		StringData: map[string]string{"password": "hunter2-recycled"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.CoreV1().Secrets(ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete of a protected Secret: %v", err)
	}
	es = kept(t, env, ns, secret.UID)
	if len(es) != 1 || !strings.Contains(string(es[0].Object), "aHVudGVyMi1yZWN5Y2xlZA==") { // base64 of the password
		t.Fatalf("the Secret's copy, opened with the key: %+v", es)
	}
	err = filepath.WalkDir(filepath.Join(env.Dir, localcluster.RecycleBinDir), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(raw, []byte("aHVudGVyMi1yZWN5Y2xlZA")) || bytes.Contains(raw, []byte("hunter2-recycled")) {
			t.Errorf("%s holds the Secret's value in clear", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A delete whose copy cannot be stored is refused (fail closed) with 503,
// saying why and both ways on; once the store is back, it goes through.
func TestRecycleBinRefusesADeleteItCannotKeep(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ledger", Labels: cascading}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The namespace's folder in the store is a file: no copy can be
	// written there (root ignores file modes, so a read-only folder would
	// not do).
	broken := filepath.Join(env.Dir, localcluster.RecycleBinDir, "entries", ns)
	if err := os.MkdirAll(filepath.Dir(broken), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = cms.Delete(ctx, "ledger", metav1.DeleteOptions{})
	var status apierrors.APIStatus
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("delete with the store broken: %v, want 503 Service Unavailable", err)
	}
	if s, ok := err.(apierrors.APIStatus); ok {
		status = s
	}
	for _, want := range []string{`configmap "ledger" in namespace "` + ns + `"`, "could not be stored", "nothing kept is deleted without a copy",
		"kubectl rampart status", "kubectl label -n " + ns + " configmap/ledger rampart.io/protection-"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if status != nil && status.Status().Code != http.StatusServiceUnavailable {
		t.Errorf("status code %d", status.Status().Code)
	}
	if _, err := cms.Get(ctx, "ledger", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ConfigMap is gone after a refused delete: %v", err)
	}
	waitDeniedEvent(t, env, ns, "ledger", 1)

	// The store back: the delete goes through, kept.
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "ledger", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete with the store back: %v", err)
	}
	if es := kept(t, env, ns, cm.UID); len(es) != 1 {
		t.Fatalf("%d copies kept, want 1", len(es))
	}
}

// A copy taken for a delete that another webhook then refused (here a
// PodUnavailableBudget, judged in parallel with the deletion webhook) is
// marked NotDeleted once the object is seen alive, and `rampart trash
// restore` never offers it as deleted.
func TestRecycleBinMarksACopyWhoseDeleteWasRefused(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	createPods(t, env, ns, "key", 1, map[string]string{"app": "key", protectionLabel: "Cascading"}, nil)
	env.WaitPodsRunning(t, ns, "app=key", 1, time.Minute)
	createBudget(t, env, ns, "key", `{selector: {matchLabels: {app: key}}, maxUnavailable: 0}`)
	pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, "key-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = env.Client.CoreV1().Pods(ns).Delete(ctx, "key-0", metav1.DeleteOptions{})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("delete of a pod its budget allows no disruption: %v, want the budget's 429", err)
	}
	// The deletion webhook may have kept a copy before the budget's
	// refusal came back (the API server calls them in parallel); if so,
	// it must end NotDeleted (this cluster's managers judge after 3 s).
	// The API server calls every matching validating webhook in parallel
	// and waits for all: the deletion webhook was called too.
	if es := kept(t, env, ns, pod.UID); len(es) != 1 || es[0].State != recyclebin.StateCaptured {
		t.Fatalf("the copies kept for the refused delete: %+v, want one, Captured until settled", es)
	}
	waitKeptState(t, env, ns, pod.UID, recyclebin.StateNotDeleted)
	if _, err := env.Client.CoreV1().Pods(ns).Get(ctx, "key-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod: %v", err)
	}
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rampart, "trash", "restore", "--kubeconfig", env.Kubeconfig, "--dir", filepath.Join(env.Dir, localcluster.RecycleBinDir),
		"-n", ns, "pod/key-0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "holds no copy of pods/key-0") {
		t.Fatalf("restore of a copy whose delete did not happen: %v\n%s", err, out)
	}
}

var recyclePoliciesGVR = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "recyclepolicies"}

// A RecyclePolicy keeps what it selects from the moment the API accepts
// it (a delete at once after the create is kept); what it does not select
// is not kept; an object it selects that Rampart also protects is kept
// once; a copy that cannot be stored refuses the delete, naming the
// policy; and the policy says it is Ready.
func TestRecyclePolicyKeepsWhatItSelectsFromTheStart(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	var uids []types.UID
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{{"kept", map[string]string{"keep": "yes"}}, {"passing", nil}, {"both", map[string]string{"keep": "yes", protectionLabel: "Cascading"}}} {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: c.labels}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, cm.UID)
	}
	// A second namespace, whose folder in the store the test breaks
	// before anything is kept there.
	other := env.Namespace(t)
	broken := filepath.Join(env.Dir, localcluster.RecycleBinDir, "entries", other)
	if err := os.MkdirAll(filepath.Dir(broken), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Labels: map[string]string{"keep": "yes"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := uniqueName("configs")
	p := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(`apiVersion: rampart.io/v1alpha1
kind: RecyclePolicy
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [%s, %s]}]}
  objectSelector: {matchLabels: {keep: "yes"}}
  retention: 24h`, name, ns, other)), &p.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(recyclePoliciesGVR).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RecyclePolicy: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(recyclePoliciesGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// At once: no wait for Ready.
	for _, n := range []string{"kept", "passing", "both"} {
		if err := cms.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", n, err)
		}
	}
	if es := kept(t, env, ns, uids[0]); len(es) != 1 || es[0].Policy != name {
		t.Errorf("the ConfigMap the policy selects: %+v, want one copy kept by RecyclePolicy %s", es, name)
	}
	if es := kept(t, env, ns, uids[1]); len(es) != 0 {
		t.Errorf("a ConfigMap the policy does not select was kept: %+v", es)
	}
	if es := kept(t, env, ns, uids[2]); len(es) != 1 {
		t.Errorf("a protected ConfigMap the policy selects too: %d copies, want 1", len(es))
	}

	// The store broken for the other namespace: refused, naming the policy.
	err := env.Client.CoreV1().ConfigMaps(other).Delete(ctx, "stuck", metav1.DeleteOptions{})
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), fmt.Sprintf("kept by RecyclePolicy %q", name)) ||
		!strings.Contains(err.Error(), "kubectl edit recyclepolicy "+name) {
		t.Fatalf("delete with the store broken: %v, want 503 naming the policy and how to take the object out of it", err)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}

	eventually(t, "the RecyclePolicy to be Ready", func(ctx context.Context) (bool, error) {
		u, err := env.Dynamic.Resource(recyclePoliciesGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "True" && m["reason"] == "Keeping" {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %v", conds)
	})
}

// watchedConfigMaps is what the leader's outside-API watch holds of
// labelled ConfigMaps.
func watchedConfigMaps(t *testing.T, env *clustertest.Env, selector string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^rampart_recyclebin_watched_objects\{resource="configmaps",selector="` + regexp.QuoteMeta(selector) + `"\} (\S+)$`).FindStringSubmatch(scrape(t, env))
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	return int(n)
}

// A protected object removed from etcd directly (no admission at all) is
// kept from the last state the leader saw, as DeletedOutsideAPI, with a
// Warning Event saying how to restore it, and so is one a RecyclePolicy
// keeps; one whose label is removed (the escape hatch) and one deleted
// through the API are not reported so.
func TestRecycleBinKeepsWhatVanishesOutsideTheAPI(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	cms := env.Client.CoreV1().ConfigMaps(ns)
	// A RecyclePolicy keeps "policy-kept" (unlabelled for protection).
	policyName := uniqueName("outside")
	p := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(`apiVersion: rampart.io/v1alpha1
kind: RecyclePolicy
metadata: {name: %s}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {kept-by: %s}}`, policyName, ns, policyName)), &p.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(recyclePoliciesGVR).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(recyclePoliciesGVR).Delete(context.Background(), policyName, metav1.DeleteOptions{})
	})
	var uids []types.UID
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{{"lost", cascading}, {"unlabelled", cascading}, {"deleted", cascading}, {"policy-kept", map[string]string{"kept-by": policyName}}} {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: c.labels}, Data: map[string]string{"v": c.name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, cm.UID)
	}
	// The watch must have seen them before they go: it holds as many
	// labelled ConfigMaps as the API server lists, and the one the policy
	// selects.
	eventually(t, "the outside-API watch to hold the new ConfigMaps", func(ctx context.Context) (bool, error) {
		all, err := env.Client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: protectionLabel})
		if err != nil {
			return false, err
		}
		return watchedConfigMaps(t, env, protectionLabel) == len(all.Items) && watchedConfigMaps(t, env, "kept-by="+policyName) == 1, nil
	})
	etcd, err := source.Client{Endpoints: []string{env.EtcdURL()}, CACert: env.PKIFile("etcd-ca.crt"),
		Cert: env.PKIFile("etcd-client.crt"), Key: env.PKIFile("etcd-client.key")}.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	for _, name := range []string{"lost", "policy-kept"} {
		if r, err := etcd.Delete(ctx, "/registry/configmaps/"+ns+"/"+name); err != nil || r.Deleted != 1 {
			t.Fatalf("removing ConfigMap %s from etcd: %+v, %v", name, r, err)
		}
	}
	if _, err := cms.Patch(ctx, "unlabelled", types.MergePatchType, []byte(`{"metadata":{"labels":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeptState(t, env, ns, uids[0], recyclebin.StateDeleted)
	e := kept(t, env, ns, uids[0])[0]
	var got corev1.ConfigMap
	if e.How != recyclebin.HowOutsideAPI || json.Unmarshal(e.Object, &got) != nil || got.Data["v"] != "lost" {
		t.Fatalf("the entry of the ConfigMap removed from etcd: %+v, want DeletedOutsideAPI with its last state", e)
	}
	waitEvent(t, env, ns, "lost", recyclebin.ReasonDeletedOutsideAPI)
	waitKeptState(t, env, ns, uids[3], recyclebin.StateDeleted)
	if e := kept(t, env, ns, uids[3])[0]; e.How != recyclebin.HowOutsideAPI {
		t.Errorf("the ConfigMap a RecyclePolicy keeps, removed from etcd: %+v, want DeletedOutsideAPI", e)
	}
	if es := kept(t, env, ns, uids[1]); len(es) != 0 {
		t.Errorf("an unlabelled ConfigMap was kept: %+v", es)
	}
	if es := kept(t, env, ns, uids[2]); len(es) != 1 || es[0].How != recyclebin.HowAPI {
		t.Errorf("the ConfigMap deleted through the API: %+v, want its one capture, through the API", es)
	}
}
