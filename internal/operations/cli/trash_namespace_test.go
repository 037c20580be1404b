package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rampart-io/rampart/internal/operations/localcluster"
	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
	"github.com/rampart-io/rampart/internal/protection/recyclebin"
)

// A protected namespace is kept whole with no RecyclePolicy, as a new user
// meets it on rampart up: a namespace labelled Cascading holding only
// ConfigMaps and a Secret is deleted (nothing live in it, so allowed), and
// `rampart trash restore namespace/NAME --with-dependents` brings back
// every object, the Secret's value included. A namespace a ProtectionPolicy
// over namespaces selects is kept whole too; an unprotected namespace's
// contents are not kept; and a protected namespace whose contents pass the
// cap (--recycle-bin-namespace-max-size) is deleted all the same, with a
// ContentsNotKept Event naming what was not kept.
func TestTrashRestoresAProtectedNamespaceWhole(t *testing.T) {
	env := clustertest.Start(t, localcluster.Options{ManagerArgs: []string{"--recycle-bin-namespace-max-size=64Ki"}})
	_, rampart, err := clustertest.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := rampartCLI(ctx, t, rampart, env)
	core := env.Client.CoreV1()
	suffix := strings.TrimPrefix(env.Namespace(t), "t-")
	labelled, byPolicy, plain, big := "whole-"+suffix, "policy-"+suffix, "plain-"+suffix, "big-"+suffix

	policy := `apiVersion: rampart.io/v1alpha1
kind: ProtectionPolicy
metadata: {name: ledgers-` + suffix + `}
spec:
  resources: [{apiGroups: [""], resources: [namespaces]}]
  objectSelector: {matchLabels: {team: ledger-` + suffix + `}}
  protection: Cascading
`
	kubectlApply(ctx, t, env, policy)
	cascading := map[string]string{"rampart.io/protection": "Cascading"}
	settings := createSettingsNamespace(ctx, t, core, labelled, cascading, "canary-whole-5e1a")
	createSettingsNamespace(ctx, t, core, byPolicy, map[string]string{"team": "ledger-" + suffix}, "canary-policy-77b0")
	createSettingsNamespace(ctx, t, core, plain, nil, "canary-plain-0c3d")
	createSettingsNamespace(ctx, t, core, big, cascading, "canary-big-a4f2")
	if _, err := core.ConfigMaps(big).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "blob"},
		Data: map[string]string{"blob": strings.Repeat("x", 100<<10)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, ns := range []string{labelled, byPolicy, plain, big} {
		if err := core.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete namespace %s holding only ConfigMaps and a Secret: %v", ns, err)
		}
	}
	// The capture never holds up the namespace controller.
	for _, ns := range []string{labelled, byPolicy, plain, big} {
		waitNamespaceGone(ctx, t, core, ns, 2*time.Minute)
	}

	bin, err := env.RecycleBin()
	if err != nil {
		t.Fatal(err)
	}
	keptOf := func(ns string) map[string]bool {
		t.Helper()
		listed, err := bin.List(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, l := range listed {
			out[l.Resource.String()+"/"+l.Name] = true
		}
		return out
	}
	for _, ns := range []string{labelled, byPolicy} {
		kept := keptOf(ns)
		for _, want := range []string{"configmaps/settings", "configmaps/derived", "secrets/db"} {
			if !kept[want] {
				t.Errorf("the bin kept %v of protected namespace %s, lacking %s", kept, ns, want)
			}
		}
	}
	if kept := keptOf(plain); len(kept) != 0 {
		t.Errorf("the bin kept %v of unprotected namespace %s, want nothing", kept, plain)
	}
	if kept := keptOf(big); kept["configmaps/blob"] {
		t.Errorf("the bin kept configmaps/blob of %s past the 64Ki cap: %v", big, kept)
	}

	// Restore the labelled namespace whole, as the user would.
	dir := filepath.Join(env.Dir, localcluster.RecycleBinDir)
	keyFile := env.PKIFile(localcluster.RecycleBinKey)
	t.Log(run("trash", "restore", "namespace/"+labelled, "--with-dependents", "--dir", dir, "--key-file", keyFile))
	ns, err := core.Namespaces().Get(ctx, labelled, metav1.GetOptions{})
	if err != nil || ns.Labels["rampart.io/protection"] != "Cascading" {
		t.Fatalf("the namespace after the restore: %+v, %v; want it back with its label", ns, err)
	}
	if restored := settingsRestored(ctx, t, core, labelled, "canary-whole-5e1a"); restored.UID == settings.UID {
		t.Errorf("settings after the restore has its old uid %s: not restored", settings.UID)
	}

	// The namespace past the cap: deleted all the same, and said so.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Namespace" && e.Regarding.Name == big && e.Reason == "ContentsNotKept" &&
				strings.Contains(e.Note, "configmaps/blob") && strings.Contains(e.Note, "--recycle-bin-namespace-max-size") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("no ContentsNotKept Event on namespace %s naming configmaps/blob and the cap", big)
	}
	// Every copy of the contents is settled, the Secret's once its
	// namespace is gone.
	listed, err := bin.List(ctx, byPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range listed {
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			e, err := bin.Get(ctx, l.StoreName)
			return err == nil && e.State == recyclebin.StateDeleted, err
		}); err != nil {
			t.Errorf("the copy of %s/%s in %s was never settled Deleted", l.Resource, l.Name, byPolicy)
		}
	}
}
