package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// rampartCLI runs rampart against env's cluster and returns its output,
// failing the test if it fails.
func rampartCLI(ctx context.Context, t *testing.T, rampart string, env *clustertest.Env) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, rampart, append(args, "--kubeconfig", env.Kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("rampart %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// A namespace deleted by mistake, with a ConfigMap, one it owns and a
// Secret, kept in a recycle bin directory (written here as the capture
// will write it): `rampart trash` lists the copies, shows the Secret only
// with its key, dry-runs the restore (nothing created) and restores the
// namespace with its contents, the owned ConfigMap pointing at its owner's
// new UID.
func TestTrashRestoresANamespaceWithItsContents(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Unprotected: true})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := "trash-" + strings.TrimPrefix(env.Namespace(t), "t-")
	core := env.Client.CoreV1()
	settings := createSettingsNamespace(ctx, t, core, ns, nil, "canary-trash-7f3a")

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{7}, recyclebin.KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := recyclebin.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := &recyclebin.Bin{Store: storage.Dir{Root: filepath.Join(dir, "bin")}, Key: key}
	deletedAt := time.Now()
	keep := func(gvr schema.GroupVersionResource, namespace, name string, at time.Time) {
		t.Helper()
		r := env.Dynamic.Resource(gvr)
		get := r.Get
		if namespace != "" {
			get = r.Namespace(namespace).Get
		}
		u, err := get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bin.Put(ctx, recyclebin.Entry{Resource: gvr, Kind: u.GetKind(), Namespace: namespace, Name: name, UID: u.GetUID(),
			DeletedAt: at, DeletedBy: "alice", How: recyclebin.HowAPI, State: recyclebin.StateDeleted, Object: raw}); err != nil {
			t.Fatal(err)
		}
	}
	// The namespace first, its contents as the namespace controller
	// deletes them, a moment later.
	keep(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ns, deletedAt)
	keep(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, ns, "settings", deletedAt.Add(time.Second))
	keep(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, ns, "derived", deletedAt.Add(time.Second))
	keep(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, ns, "db", deletedAt.Add(time.Second))

	if err := core.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespaceGone(ctx, t, core, ns, time.Minute)

	run := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, rampart, append(append([]string{"trash"}, args...), "--dir", filepath.Join(dir, "bin"), "--kubeconfig", env.Kubeconfig)...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("rampart trash %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	list := must("list", "-A", "--key-file", keyFile)
	for _, want := range []string{"namespaces/" + ns, "configmaps/settings", "configmaps/derived", "secrets/db", "alice"} {
		if !strings.Contains(list, want) {
			t.Errorf("trash list lacks %q:\n%s", want, list)
		}
	}
	if out := must("show", "-n", ns, "secret/db", "--key-file", keyFile); !strings.Contains(out, "password:") {
		t.Errorf("trash show with the key:\n%s", out)
	}
	if out, err := run("show", "-n", ns, "secret/db"); err == nil || !strings.Contains(out, "sealed with key "+key.ID()) {
		t.Errorf("trash show of a Secret without the key: %v\n%s", err, out)
	}
	dry := must("restore", "namespace/"+ns, "--with-dependents", "--dry-run", "--key-file", keyFile)
	if !strings.Contains(dry, "would create namespaces/"+ns) || !strings.Contains(dry, "would create configmaps/derived in namespace "+ns) || !strings.Contains(dry, "nothing was created") || !strings.Contains(dry, "not validated by the API server") {
		t.Errorf("dry run:\n%s", dry)
	}
	if _, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the dry run the namespace: %v; want nothing created", err)
	}
	t.Log(must("restore", "namespace/"+ns, "--with-dependents", "--key-file", keyFile))
	restored, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || restored.Data["mode"] != "live" || restored.UID == settings.UID {
		t.Fatalf("settings after the restore: %+v, %v", restored, err)
	}
	derived, err := core.ConfigMaps(ns).Get(ctx, "derived", metav1.GetOptions{})
	if err != nil || len(derived.OwnerReferences) != 1 || derived.OwnerReferences[0].UID != restored.UID {
		t.Fatalf("derived after the restore: %+v, %v; want it owned by the restored settings (uid %s)", derived, err, restored.UID)
	}
	secret, err := core.Secrets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil || string(secret.Data["password"]) != "canary-trash-7f3a" {
		t.Fatalf("the Secret after the restore: %v", err)
	}
	if out, err := run("restore", "-n", ns, "configmap/settings"); err != nil || !strings.Contains(out, "left alone: configmaps/settings in namespace "+ns+" exists") {
		t.Errorf("restoring over a live object: %v\n%s", err, out)
	}
}

// The whole path, as a user meets it: a namespace labelled Cascading,
// emptied of workloads, is deleted by mistake; the recycle bin kept it
// (the deletion webhook) and its ConfigMaps and Secret (a RecyclePolicy,
// as the namespace controller deleted them); `rampart status` shows what
// the bin holds; `rampart trash restore --with-dependents` brings it all
// back, the owned ConfigMap pointing at its owner's new UID.
func TestTrashRestoresWhatTheBinKeptOfADeletedNamespace(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{ManagerArgs: []string{"--recycle-bin-maintain-every=1s"}})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "kept-" + strings.TrimPrefix(env.Namespace(t), "t-")
	run := rampartCLI(ctx, t, rampart, env)
	policy := `apiVersion: rampart.io/v1alpha1
kind: RecyclePolicy
metadata: {name: ` + ns + `}
spec:
  resources: [{apiGroups: [""], resources: [configmaps, secrets]}]
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ` + ns + `}}
  retention: 24h
`
	kubectlApply(ctx, t, env, policy)
	core := env.Client.CoreV1()
	createSettingsNamespace(ctx, t, core, ns, map[string]string{"rampart.io/protection": "Cascading"}, "canary-kept-91c2")
	if err := core.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete of an empty Cascading namespace: %v", err)
	}
	waitNamespaceGone(ctx, t, core, ns, 2*time.Minute)
	dir := filepath.Join(env.Dir, localcluster.RecycleBinDir)
	keyFile := env.PKIFile(localcluster.RecycleBinKey)
	list := run("trash", "list", "-A", "--dir", dir, "--key-file", keyFile)
	for _, want := range []string{"namespaces/" + ns, "configmaps/settings", "configmaps/derived", "secrets/db", "system:serviceaccount:kube-system:namespace-controller"} {
		if !strings.Contains(list, want) {
			t.Errorf("trash list lacks %q:\n%s", want, list)
		}
	}
	// The leader's summary, in rampart status.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		status := run("status", "--rampart-namespace", localcluster.ManagerNamespace)
		_, bin, _ := strings.Cut(status, "RECYCLE BIN")
		return strings.Contains(bin, dir) && strings.Contains(bin, "Deleted=") && !strings.Contains(bin, "Captured=") && strings.Contains(bin, ns+"  ") && strings.Contains(bin, "True (Keeping)"), nil
	}); err != nil {
		t.Errorf("rampart status never showed the 4 copies and the policy Ready:\n%s", run("status", "--rampart-namespace", localcluster.ManagerNamespace))
	}
	t.Log(run("trash", "restore", "namespace/"+ns, "--with-dependents", "--dir", dir, "--key-file", keyFile))
	restored := settingsRestored(ctx, t, core, ns, "canary-kept-91c2")
	// Changed since: a dry run shows the diff, --overwrite puts the copy
	// back over the live object.
	restored.Data["mode"] = "changed"
	if _, err := core.ConfigMaps(ns).Update(ctx, restored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dry := run("trash", "restore", "-n", ns, "configmap/settings", "--dry-run", "--dir", dir, "--key-file", keyFile)
	if !strings.Contains(dry, "left alone: configmaps/settings in namespace "+ns+" exists") || !strings.Contains(dry, "-  mode: changed") || !strings.Contains(dry, "+  mode: live") {
		t.Errorf("dry run over a changed live object:\n%s", dry)
	}
	t.Log(run("trash", "restore", "-n", ns, "configmap/settings", "--overwrite", "--dir", dir, "--key-file", keyFile))
	if cm, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil || cm.Data["mode"] != "live" || cm.UID != restored.UID {
		t.Errorf("after --overwrite: %+v, %v; want the copy's data on the live object", cm, err)
	}
}

// createSettingsNamespace makes the namespace the trash tests delete and
// restore: ConfigMap settings, ConfigMap derived owned by settings (its
// ownerReference must follow settings' new UID), and Secret db holding
// password (a canary the logs must never show). It returns settings.
func createSettingsNamespace(ctx context.Context, t *testing.T, core typedcorev1.CoreV1Interface, ns string, nsLabels map[string]string, password string) *corev1.ConfigMap {
	t.Helper()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: nsLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settings, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "live"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "derived",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings", UID: settings.UID}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": password}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return settings
}

// waitNamespaceGone waits until namespace ns is deleted.
func waitNamespaceGone(ctx context.Context, t *testing.T, core typedcorev1.CoreV1Interface, ns string, within time.Duration) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		_, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("namespace %s was never deleted", ns)
	}
}

// settingsRestored checks what createSettingsNamespace made is back in ns
// after a restore: settings with its data, derived owned by the restored
// settings (its new UID), and Secret db with password. It returns settings.
func settingsRestored(ctx context.Context, t *testing.T, core typedcorev1.CoreV1Interface, ns, password string) *corev1.ConfigMap {
	t.Helper()
	restored, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || restored.Data["mode"] != "live" {
		t.Fatalf("settings after the restore: %+v, %v", restored, err)
	}
	derived, err := core.ConfigMaps(ns).Get(ctx, "derived", metav1.GetOptions{})
	if err != nil || len(derived.OwnerReferences) != 1 || derived.OwnerReferences[0].UID != restored.UID {
		t.Fatalf("derived after the restore: %+v, %v; want it owned by the restored settings (uid %s)", derived, err, restored.UID)
	}
	if secret, err := core.Secrets(ns).Get(ctx, "db", metav1.GetOptions{}); err != nil || string(secret.Data["password"]) != password {
		t.Fatalf("the Secret after the restore: %v; want its value back", err)
	}
	return restored
}
