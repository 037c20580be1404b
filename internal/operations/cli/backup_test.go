package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rampart-io/rampart/internal/operations/backup"
	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/plumbing/storage"
	"github.com/rampart-io/rampart/internal/plumbing/storage/s3test"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// A namespace with a Deployment (its ReplicaSet and pods), a ConfigMap, a
// Secret and a custom resource is backed up, then deleted by mistake.
// `rampart backup restore --dry-run` prints the plan (create for each,
// the CRD unchanged) and creates nothing; the restore brings everything
// back, the ReplicaSet and pods owned by the new UIDs, the Secret with
// its data (sealed in the archive). Over a changed object the dry run
// shows the field that differs and skips it; over one being deleted it
// is a conflict and exits non-zero; --object restores one object by
// name. Nodes, events and leases are neither in the backup nor restored.
// Then the same through an S3 bucket (SeaweedFS).
func TestBackupRestoresADeletedNamespace(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{Unprotected: true})
	env.AddNodes(t, 1)
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := "shop-" + strings.TrimPrefix(env.Namespace(t), "t-")
	core := env.Client.CoreV1()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A custom resource, its CRD named for the test (CRDs are cluster-wide).
	group := ns + ".example.com"
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.` + group + `}
spec:
  group: ` + group + `
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
	kubectlApply(ctx, t, env, crd)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err := env.Kubectl(t, "wait", "--for=condition=Established", "crd/widgets."+group, "--timeout=5s")
		return err == nil && strings.Contains(out, "condition met"), nil
	}); err != nil {
		t.Fatal("the CRD was never established")
	}
	kubectlApply(ctx, t, env, `apiVersion: `+group+`/v1
kind: Widget
metadata: {name: gear, namespace: `+ns+`}
spec: {teeth: 12}
`)
	if _, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"mode": "live"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const canary = "canary-backup-5e1d"
	if _, err := core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": canary}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	deploy, err := env.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A Job: its selector and pod labels carry its UID, which the API
	// server refuses to take from a restore. (Suspended: no pods.)
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "report"}, Spec: batchv1.JobSpec{
		Suspend:  ptr.To(true),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "r", Image: "report:1"}}}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oldPods := env.WaitPodsRunning(t, ns, "app=web", 2, 2*time.Minute)

	dir := t.TempDir()
	store := filepath.Join(dir, "backups")
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{9}, recyclebin.KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		args = append(append([]string{"backup"}, args...), "--kubeconfig", env.Kubeconfig, "--key-file", keyFile)
		out, err := exec.CommandContext(ctx, rampart, args...).CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("rampart backup %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	created := must("create", "before", "--namespaces", ns, "--store", store)
	t.Log(created)
	if !strings.Contains(created, "backup before: ") || !strings.Contains(created, "at revision") {
		t.Errorf("backup create says:\n%s", created)
	}
	if out, err := run("create", "before", "--namespaces", ns, "--store", store); err == nil || !strings.Contains(out, "backup before exists") {
		t.Errorf("a second backup of the same name: %v\n%s", err, out)
	}
	if list := must("list", "--store", store); !strings.Contains(list, "before") || !strings.Contains(list, ns) {
		t.Errorf("backup list:\n%s", list)
	}
	described := must("describe", "before", "--store", store)
	t.Log(described)
	server, err := env.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deployments.apps", "replicasets.apps", "pods", "configmaps", "secrets", "widgets." + group,
		"customresourcedefinitions.apiextensions.k8s.io", "namespaces", "API server:       " + server.GitVersion, "consistent: yes",
		"nodes: a node registers itself", "events: events are a record", "leases.coordination.k8s.io: leases are"} {
		if !strings.Contains(described, want) {
			t.Errorf("backup describe lacks %q", want)
		}
	}
	// The manifest counts what the archive holds, per resource; no node,
	// event or lease is in it; the Secret is sealed.
	fs := storage.Dir{Root: store}
	m, objs, err := backup.Read(ctx, fs, "before", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, r := range m.Resources {
		counts[r.GVR().GroupResource().String()] = r.Count
	}
	for gr, want := range map[string]int{"deployments.apps": 1, "replicasets.apps": 1, "pods": 2, "secrets": 1, "widgets." + group: 1,
		"namespaces": 1, "customresourcedefinitions.apiextensions.k8s.io": 1} {
		if counts[gr] != want {
			t.Errorf("the manifest counts %d %s, want %d (%v)", counts[gr], gr, want, counts)
		}
	}
	for _, o := range objs {
		if o.File.Namespace != ns && o.File.Resource != "namespaces" && o.File.Resource != "customresourcedefinitions" {
			t.Errorf("%s is in the backup of namespace %s", o.File.Described(), ns)
		}
		switch o.File.Resource {
		case "nodes", "events", "leases":
			t.Errorf("%s is in the backup", o.File.Described())
		case "secrets":
			if o.Data != nil || o.File.KeyID == "" {
				t.Errorf("the Secret opened without a key, or was not sealed: %+v", o.File)
			}
		}
	}
	if strings.Contains(untar(t, filepath.Join(store, filepath.FromSlash(backup.ArchiveName("before")))), canary) {
		t.Error("the archive holds the Secret's value in clear")
	}

	// Deleted by mistake.
	deleteNamespace(ctx, t, env, ns)

	dry := must("restore", "before", "--namespace", ns, "--dry-run", "--store", store)
	t.Log(dry)
	for _, want := range []string{
		"create            namespaces/" + ns,
		"create            deployments.apps/web in namespace " + ns,
		"create            widgets." + group + "/gear in namespace " + ns,
		"create            secrets/db in namespace " + ns,
		"unchanged         customresourcedefinitions.apiextensions.k8s.io/widgets." + group,
		"0 conflict", "nothing is changed",
	} {
		if !strings.Contains(dry, want) {
			t.Errorf("the dry run lacks %q", want)
		}
	}
	if _, err := core.Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the dry run the namespace: %v; want nothing created", err)
	}

	restored := must("restore", "before", "--namespace", ns, "--store", store)
	t.Log(restored)
	newDeploy, err := env.Client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil || newDeploy.UID == deploy.UID {
		t.Fatalf("the Deployment after the restore: %v (uid %s, was %s)", err, newDeploy.UID, deploy.UID)
	}
	// The chain is whole: every ReplicaSet owned by the new Deployment,
	// every pod by a live ReplicaSet; the pods that were backed up are
	// back (or replaced by the ReplicaSet, never left pointing at an old
	// UID, which the garbage collector would delete).
	rss, err := env.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(rss.Items) != 1 {
		t.Fatalf("ReplicaSets after the restore: %v, %v", rss, err)
	}
	rs := rss.Items[0]
	if refs := rs.OwnerReferences; len(refs) != 1 || refs[0].UID != newDeploy.UID {
		t.Errorf("the ReplicaSet's owner %+v, want the restored Deployment (uid %s)", refs, newDeploy.UID)
	}
	pods := env.WaitPodsRunning(t, ns, "app=web", 2, 2*time.Minute)
	restoredPods := 0
	for _, p := range pods {
		if refs := p.OwnerReferences; len(refs) != 1 || refs[0].UID != rs.UID {
			t.Errorf("pod %s's owner %+v, want the ReplicaSet (uid %s)", p.Name, refs, rs.UID)
		}
		for _, old := range oldPods {
			if old.Name == p.Name {
				restoredPods++
			}
		}
	}
	t.Logf("%d of the 2 pods running are the restored ones", restoredPods)
	if !strings.Contains(restored, "owner Deployment/web restored as uid "+string(newDeploy.UID)) {
		t.Errorf("the restore does not say the ReplicaSet's owner was relinked:\n%s", restored)
	}
	if s, err := core.Secrets(ns).Get(ctx, "db", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != canary {
		t.Errorf("the Secret after the restore: %v", err)
	}
	if _, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "report", metav1.GetOptions{}); err != nil {
		t.Errorf("the Job after the restore: %v", err)
	}
	widgets := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	if w, err := env.Dynamic.Resource(widgets).Namespace(ns).Get(ctx, "gear", metav1.GetOptions{}); err != nil {
		t.Errorf("the custom resource after the restore: %v", err)
	} else if teeth, _, _ := unstructured.NestedInt64(w.Object, "spec", "teeth"); teeth != 12 {
		t.Errorf("the custom resource's spec: %v", w.Object["spec"])
	}
	if evs, err := core.Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			if e.CreationTimestamp.Before(&newDeploy.CreationTimestamp) {
				t.Errorf("an event older than the restore is in the namespace: %s", e.Name)
			}
		}
	}

	// Changed since: the dry run shows the field, leaves it (exit 0).
	cm, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["mode"] = "changed"
	if cm, err = core.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dry = must("restore", "before", "-n", ns, "--object", "configmap/settings", "--dry-run", "--store", store)
	if !strings.Contains(dry, "skipped (exists)  configmaps/settings in namespace "+ns) || !strings.Contains(dry, `~ .data.mode: "changed" -> "live"`) {
		t.Errorf("dry run over a changed ConfigMap:\n%s", dry)
	}
	// Being deleted: a conflict, and the dry run fails.
	cm.Finalizers = []string{"example.com/hold"}
	if _, err = core.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := core.ConfigMaps(ns).Delete(ctx, "settings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := run("restore", "before", "-n", ns, "--object", "configmap/settings", "--dry-run", "--store", store)
	if err == nil || !strings.Contains(out, "conflict          configmaps/settings") || !strings.Contains(out, "being deleted") || !strings.Contains(out, "1 of 1 objects would conflict") {
		t.Errorf("dry run over a ConfigMap being deleted: %v\n%s", err, out)
	}
	if _, err := core.ConfigMaps(ns).Patch(ctx, "settings", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, func(ctx context.Context) error {
		_, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
		return err
	})
	// One object by name.
	if out := must("restore", "before", "-n", ns, "--object", "configmap/settings", "--store", store); !strings.Contains(out, "1 create, 0 update") {
		t.Errorf("restore --object:\n%s", out)
	}
	if cm, err := core.ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{}); err != nil || cm.Data["mode"] != "live" {
		t.Errorf("settings after restore --object: %+v, %v", cm, err)
	}
	if out, err := run("restore", "before", "--object", "node/anything", "--store", store); err == nil || !strings.Contains(out, "holds no node/anything") {
		t.Errorf("restore of a node: %v\n%s", err, out)
	}

	must("delete", "before", "--store", store)
	if list := must("list", "--store", store); strings.Contains(list, "before") {
		t.Errorf("backup list after delete:\n%s", list)
	}

	// The same through S3.
	srv := s3test.Start(t)
	srv.Bucket(t, "rampart-backups")
	location := srv.Location("rampart-backups", "cluster-a")
	must("create", "in-s3", "--namespaces", ns, "--store", location)
	if list := must("list", "--store", location); !strings.Contains(list, "in-s3") {
		t.Errorf("backup list in S3:\n%s", list)
	}
	if err := core.Secrets(ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := must("restore", "in-s3", "-n", ns, "--object", "secret/db", "--store", location); !strings.Contains(out, "create            secrets/db in namespace "+ns) {
		t.Errorf("restore of the Secret from S3:\n%s", out)
	}
	if s, err := core.Secrets(ns).Get(ctx, "db", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != canary {
		t.Errorf("the Secret restored from S3: %v", err)
	}
}

func kubectlApply(ctx context.Context, t *testing.T, env *clustertest.Env, manifest string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, env.KubectlPath(), "--kubeconfig", env.Kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func deleteNamespace(ctx context.Context, t *testing.T, env *clustertest.Env, ns string) {
	t.Helper()
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, func(ctx context.Context) error {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
}

// waitGone waits until get answers NotFound.
func waitGone(ctx context.Context, t *testing.T, get func(context.Context) error) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	}); err != nil {
		t.Fatal("never gone")
	}
}

// untar is every file of a gzipped tar, concatenated.
func untar(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	tr := tar.NewReader(gz)
	for {
		if _, err := tr.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(&all, tr); err != nil {
			t.Fatal(err)
		}
	}
	return all.String()
}
